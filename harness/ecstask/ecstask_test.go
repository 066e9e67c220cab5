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
