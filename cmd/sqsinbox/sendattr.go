package main

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// attrFlags collects --attr NAME[:TYPE]=VALUE, repeatable.
type attrFlags []string

func (a *attrFlags) String() string { return strings.Join(*a, " ") }

func (a *attrFlags) Set(v string) error {
	*a = append(*a, v)
	return nil
}

// parseAttrs turns the --attr values into message attributes, checked as SQS checks them, and
// returns their size as SQS counts it (name, type and value). reserved names an attribute that
// send sets itself.
func parseAttrs(specs []string, reserved string) (map[string]types.MessageAttributeValue, int, error) {
	if len(specs) == 0 {
		return nil, 0, nil
	}
	const usage = "want NAME=VALUE, NAME:String=VALUE or NAME:Number=VALUE"
	out := make(map[string]types.MessageAttributeValue, len(specs))
	size := 0
	for _, spec := range specs {
		left, value, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, 0, fmt.Errorf("%w: --attr %q: no '=': %s", errUsage, spec, usage)
		}
		name, typ, typed := strings.Cut(left, ":")
		if !typed {
			typ = "String"
		}
		if err := outbox.ValidateAttributeName(name); err != nil {
			return nil, 0, fmt.Errorf("%w: --attr %q: the name %w (SQS's rule: 1 to 256 of A-Z a-z 0-9 _ - ., no AWS. or Amazon. prefix)", errUsage, spec, err)
		}
		switch {
		case name == reserved:
			return nil, 0, fmt.Errorf("%w: --attr %q: send sets %s itself, from --key-field", errUsage, spec, reserved)
		case out[name].DataType != nil:
			return nil, 0, fmt.Errorf("%w: --attr %q: %s is given twice", errUsage, spec, name)
		case value == "":
			return nil, 0, fmt.Errorf("%w: --attr %q: the value is empty, and SQS refuses an empty attribute value", errUsage, spec)
		}
		if err := outbox.ValidateText(value); err != nil {
			return nil, 0, fmt.Errorf("%w: --attr %q: the value %w", errUsage, spec, err)
		}
		v := types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(value)}
		switch typ {
		case "String":
		case "Number":
			if err := outbox.ValidateNumber(value); err != nil {
				return nil, 0, fmt.Errorf("%w: --attr %q: %w (SQS takes up to 38 significant digits, -10^128 to 10^126)", errUsage, spec, err)
			}
		default:
			return nil, 0, fmt.Errorf("%w: --attr %q: type %q: %s", errUsage, spec, typ, usage)
		}
		out[name] = v
		size += len(name) + len(typ) + len(value)
	}
	if len(out)+1 > maxAttributes { // the event_id attribute is one more
		return nil, 0, fmt.Errorf("%w: %d --attr and event_id make %d message attributes; SQS takes at most %d",
			errUsage, len(out), len(out)+1, maxAttributes)
	}
	return out, size, nil
}
