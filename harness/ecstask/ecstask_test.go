package ecstask

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestRead (no servers): the containers of testdata/task, evaluated with the variables'
// defaults: a local that refers to a local, a conditional list, a function call, and values only
// an apply knows (a module's output, a variable without a default) left unknown.
func TestRead(t *testing.T) {
	t.Parallel()
	cs, err := Read("testdata/task", "app")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		env := []string{}
		for k, v := range c.Env {
			if v == nil {
				env = append(env, k+"=?")
			} else {
				env = append(env, k+"="+*v)
			}
		}
		slices.Sort(env)
		got = append(got, fmt.Sprintf("%s argv=%q health=%q env=%v deps=%v", c.Name, c.Argv(), c.HealthCheck, env, c.DependsOn))
	}
	want := []string{
		`app argv=["/app"] health=["CMD" "/app" "healthcheck"] env=[DATABASE_URL=? MODE=fast QUEUE_URL=?] deps=map[sidecar:SUCCESS]`,
		`sidecar argv=["/app" "migrate" "now"] health=[] env=[DATABASE_URL=?] deps=map[]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := Read("testdata/task", "other"); err == nil || !strings.Contains(err.Error(), "aws_ecs_task_definition.other") {
		t.Errorf("Read of a missing resource: %v", err)
	}
}

// TestModuleInputs (no server): the ECS example's queue module gets the example's arguments over
// the module's own defaults.
func TestModuleInputs(t *testing.T) {
	in, err := ModuleInputs("../../terraform/examples/ecs-worker", "queue")
	if err != nil {
		t.Fatal(err)
	}
	num := func(name string) int64 {
		t.Helper()
		n, err := Int(in, name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for name, want := range map[string]int64{
		"visibility_timeout_seconds":    30,      // the example's
		"message_retention_seconds":     345600,  // the example's
		"max_receive_count":             5,       // the example's
		"dlq_message_retention_seconds": 1209600, // the module's default
		"maximum_message_size":          262144,  // the module's default
	} {
		if got := num(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if v := in["fifo_queue"]; !v.IsKnown() || v.IsNull() || v.True() {
		t.Errorf("fifo_queue = %#v, want false", v)
	}
	if v := in["kms_key_arn"]; !v.IsNull() {
		t.Errorf("kms_key_arn = %#v, want null", v)
	}
	if _, err := ModuleInputs("../../terraform/examples/ecs-worker", "nope"); err == nil {
		t.Error("a module that is not there gave no error")
	}
}
