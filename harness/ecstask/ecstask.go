// Package ecstask reads the containers of an ECS task definition from Terraform source, for
// tests that run a worker program the way ECS would: terraform/examples/ecs-worker's
// aws_ecs_task_definition, its container_definitions evaluated as plan would with the variables'
// defaults. What only an apply knows (a queue's URL, a secret's ARN) stays unknown, for the test
// to supply.
package ecstask

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// Container is one container definition.
type Container struct {
	Name string
	// EntryPoint and Command are the container's entryPoint and command (nil when unset).
	EntryPoint, Command []string
	// HealthCheck is healthCheck.command, in ECS's form: "CMD" then the argv (nil when unset).
	HealthCheck []string
	// Env holds the environment and the secrets, by name: the value when the source fixes it,
	// nil when only an apply knows it (a module's output, a secret).
	Env map[string]*string
	// DependsOn maps a container's name to the condition this one waits for.
	DependsOn map[string]string
}

// Argv returns the command the container runs, its entry point then its command.
func (c Container) Argv() []string { return slices.Concat(c.EntryPoint, c.Command) }

// Read evaluates the container_definitions of the aws_ecs_task_definition named resource in the
// Terraform files of dir, with each variable at its default.
func Read(dir, resource string) ([]Container, error) {
	bodies, vars, err := load(dir)
	if err != nil {
		return nil, err
	}
	locals := map[string]hclsyntax.Expression{}
	var defs hclsyntax.Expression
	for _, body := range bodies {
		for _, b := range body.Blocks {
			switch {
			case b.Type == "locals":
				for name, a := range b.Body.Attributes {
					locals[name] = a.Expr
				}
			case b.Type == "resource" && slices.Equal(b.Labels, []string{"aws_ecs_task_definition", resource}):
				if a, ok := b.Body.Attributes["container_definitions"]; ok {
					defs = a.Expr
				}
			}
		}
	}
	call, ok := defs.(*hclsyntax.FunctionCallExpr)
	if !ok || call.Name != "jsonencode" || len(call.Args) != 1 {
		return nil, fmt.Errorf("ecstask: aws_ecs_task_definition.%s in %s has no container_definitions = jsonencode(...)", resource, dir)
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)},
		Functions: map[string]function.Function{
			"concat": stdlib.ConcatFunc, "reverse": stdlib.ReverseListFunc, "split": stdlib.SplitFunc,
			"lower": stdlib.LowerFunc, "replace": stdlib.ReplaceFunc, "format": stdlib.FormatFunc,
		},
	}
	// Whatever is not a variable or a local (a module's outputs, other resources' attributes)
	// is known only after an apply.
	unknownRoots := func(e hclsyntax.Expression) {
		for _, tr := range e.Variables() {
			if root := tr.RootName(); root != "var" && root != "local" {
				ctx.Variables[root] = cty.DynamicVal
			}
		}
	}
	unknownRoots(call.Args[0])
	// Locals may refer to locals: evaluate them until none changes.
	lv := map[string]cty.Value{}
	for name, e := range locals {
		lv[name] = cty.DynamicVal
		unknownRoots(e)
	}
	for range len(locals) + 1 {
		ctx.Variables["local"] = cty.ObjectVal(lv)
		next := map[string]cty.Value{}
		for name, e := range locals {
			v, diags := e.Value(ctx)
			if diags.HasErrors() {
				v = cty.DynamicVal // a local the task definition does not need may use other functions
			}
			next[name] = v
		}
		lv = next
	}
	ctx.Variables["local"] = cty.ObjectVal(lv)
	v, diags := call.Args[0].Value(ctx)
	if diags.HasErrors() {
		return nil, fmt.Errorf("ecstask: container_definitions: %w", diags)
	}
	if !v.IsKnown() || !v.CanIterateElements() {
		return nil, fmt.Errorf("ecstask: container_definitions is not a known list of containers")
	}
	var out []Container
	for it := v.ElementIterator(); it.Next(); {
		_, cv := it.Element()
		c, err := container(cv)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// load parses the Terraform files of dir and returns them with their variables at their
// defaults.
func load(dir string) ([]*hclsyntax.Body, map[string]cty.Value, error) {
	bodies, err := parseDir(dir)
	if err != nil {
		return nil, nil, err
	}
	vars, err := variables(bodies)
	return bodies, vars, err
}

// Int returns the variable name of vars (as [ModuleInputs] returns them) as an integer, or an
// error when it is not a known whole number.
func Int(vars map[string]cty.Value, name string) (int64, error) {
	v := vars[name]
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.Number {
		return 0, fmt.Errorf("ecstask: %s = %#v; not a known number", name, v)
	}
	n, acc := v.AsBigFloat().Int64()
	if acc != big.Exact {
		return 0, fmt.Errorf("ecstask: %s = %s; not a whole number", name, v.AsBigFloat())
	}
	return n, nil
}

// parseDir parses the Terraform files of dir.
func parseDir(dir string) ([]*hclsyntax.Body, error) {
	var bodies []*hclsyntax.Body
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("ecstask: no .tf files in %s", dir)
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("ecstask: %w", diags)
		}
		bodies = append(bodies, f.Body.(*hclsyntax.Body))
	}
	return bodies, nil
}

// variables returns the variables of bodies at their defaults; one without a default (given at
// plan time) is unknown.
func variables(bodies []*hclsyntax.Body) (map[string]cty.Value, error) {
	vars := map[string]cty.Value{}
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type != "variable" || len(b.Labels) != 1 {
				continue
			}
			vars[b.Labels[0]] = cty.DynamicVal
			if a, ok := b.Body.Attributes["default"]; ok {
				v, diags := a.Expr.Value(nil)
				if diags.HasErrors() {
					return nil, fmt.Errorf("ecstask: variable %s: %w", b.Labels[0], diags)
				}
				vars[b.Labels[0]] = v
			}
		}
	}
	return vars, nil
}

// moduleMeta are a module block's arguments that are not the module's variables.
var moduleMeta = []string{"source", "version", "count", "for_each", "providers", "depends_on"}

// ModuleInputs returns the variables of the module that the module block named module in the
// Terraform files of dir calls, as plan gives them with dir's variables at their defaults: each
// argument of the block, evaluated, over the module's own defaults (its source must be a local
// path, relative to dir). An argument that only an apply knows (another resource's attribute, a
// variable without a default) is unknown.
func ModuleInputs(dir, module string) (map[string]cty.Value, error) {
	bodies, vars, err := load(dir)
	if err != nil {
		return nil, err
	}
	var call *hclsyntax.Block
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type == "module" && slices.Equal(b.Labels, []string{module}) {
				call = b
			}
		}
	}
	if call == nil {
		return nil, fmt.Errorf("ecstask: no module %q in %s", module, dir)
	}
	src, ok := call.Body.Attributes["source"]
	var source cty.Value
	if ok {
		source, _ = src.Expr.Value(nil)
	}
	if !ok || source.Type() != cty.String || !strings.HasPrefix(source.AsString(), ".") {
		return nil, fmt.Errorf("ecstask: module %q in %s has no local source", module, dir)
	}
	_, inputs, err := load(filepath.Join(dir, source.AsString()))
	if err != nil {
		return nil, err
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)}}
	for name, a := range call.Body.Attributes {
		if slices.Contains(moduleMeta, name) {
			continue
		}
		if _, ok := inputs[name]; !ok {
			return nil, fmt.Errorf("ecstask: module %q in %s sets %s, which the module does not declare", module, dir, name)
		}
		v, diags := a.Expr.Value(ctx)
		if diags.HasErrors() {
			v = cty.DynamicVal // refers to what only an apply knows
		}
		inputs[name] = v
	}
	return inputs, nil
}

func container(v cty.Value) (Container, error) {
	c := Container{Env: map[string]*string{}, DependsOn: map[string]string{}}
	name := attr(v, "name")
	if s, ok := str(name); ok {
		c.Name = s
	} else {
		return c, fmt.Errorf("ecstask: a container without a known name")
	}
	var err error
	if c.EntryPoint, err = strs(attr(v, "entryPoint")); err != nil {
		return c, fmt.Errorf("ecstask: container %s: entryPoint: %w", c.Name, err)
	}
	if c.Command, err = strs(attr(v, "command")); err != nil {
		return c, fmt.Errorf("ecstask: container %s: command: %w", c.Name, err)
	}
	if c.HealthCheck, err = strs(attr(attr(v, "healthCheck"), "command")); err != nil {
		return c, fmt.Errorf("ecstask: container %s: healthCheck.command: %w", c.Name, err)
	}
	for _, list := range [][2]string{{"environment", "value"}, {"secrets", "valueFrom"}} {
		l := attr(v, list[0])
		if l.IsNull() {
			continue
		}
		if !l.IsKnown() || !l.CanIterateElements() {
			return c, fmt.Errorf("ecstask: container %s: %s is not a known list", c.Name, list[0])
		}
		for it := l.ElementIterator(); it.Next(); {
			_, kv := it.Element()
			k, ok := str(attr(kv, "name"))
			if !ok {
				return c, fmt.Errorf("ecstask: container %s: %s has an entry without a known name", c.Name, list[0])
			}
			c.Env[k] = nil
			if s, ok := str(attr(kv, list[1])); ok && list[0] == "environment" {
				c.Env[k] = &s
			}
		}
	}
	if d := attr(v, "dependsOn"); !d.IsNull() && d.IsKnown() && d.CanIterateElements() {
		for it := d.ElementIterator(); it.Next(); {
			_, dv := it.Element()
			n, ok1 := str(attr(dv, "containerName"))
			cond, ok2 := str(attr(dv, "condition"))
			if !ok1 || !ok2 {
				return c, fmt.Errorf("ecstask: container %s: dependsOn has an entry without a known containerName and condition", c.Name)
			}
			c.DependsOn[n] = cond
		}
	}
	return c, nil
}

// attr returns v's attribute name, or null when v has none.
func attr(v cty.Value, name string) cty.Value {
	if v.IsNull() || !v.IsKnown() || !v.Type().IsObjectType() || !v.Type().HasAttribute(name) {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	return v.GetAttr(name)
}

func str(v cty.Value) (string, bool) {
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// strs returns a list of known strings (nil for null).
func strs(v cty.Value) ([]string, error) {
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsKnown() || !v.CanIterateElements() {
		return nil, fmt.Errorf("not a known list")
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		s, ok := str(e)
		if !ok {
			return nil, fmt.Errorf("element %d is not a known string", len(out))
		}
		out = append(out, s)
	}
	return out, nil
}
