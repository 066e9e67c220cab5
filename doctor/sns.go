package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/sqsinbox/sqsinbox/worker"
)

// maxSubscriptionPages bounds the listing of an account's subscriptions (100 a page).
const maxSubscriptionPages = 100

// checkSNS finds the SNS subscriptions that deliver to the queue and checks each: its raw
// delivery against the worker's SNS mode, its filter policy against the router's routes, and the
// queue policy that must let its topic send.
func (r *run) checkSNS(ctx context.Context) {
	q := r.queue
	arn := q.Attributes["QueueArn"]
	if arn == "" {
		return
	}
	r.checked("sns")
	var subs []snsSub
	in := &sns.ListSubscriptionsInput{}
	for range maxSubscriptionPages {
		out, err := r.deps.SNS.ListSubscriptions(ctx, in)
		if err != nil {
			r.add(Finding{Severity: Warning, Check: "sns.list", Setting: "the SNS subscriptions to " + q.Name,
				Seen: "not listable: " + oneLine(err), Want: "sns:ListSubscriptions and sns:GetSubscriptionAttributes, to check them",
				Fix: "run doctor with credentials that may list subscriptions, or pass --no-sns"})
			return
		}
		for _, s := range out.Subscriptions {
			if aws.ToString(s.Protocol) == "sqs" && aws.ToString(s.Endpoint) == arn {
				subs = append(subs, snsSub{arn: aws.ToString(s.SubscriptionArn), topic: aws.ToString(s.TopicArn)})
			}
		}
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	for _, s := range subs {
		out, err := r.deps.SNS.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: aws.String(s.arn)})
		if err != nil {
			r.add(Finding{Severity: Warning, Check: "sns.list", Setting: "subscription " + s.arn,
				Seen: "not readable: " + oneLine(err), Want: "sns:GetSubscriptionAttributes, to check it",
				Fix: "run doctor with credentials that may read subscriptions"})
			continue
		}
		r.checkSubscription(s, out.Attributes)
		r.checkQueuePolicy(s)
	}
}

type snsSub struct{ arn, topic string }

// checkSubscription checks one subscription's raw delivery and filter policy.
func (r *run) checkSubscription(s snsSub, attrs map[string]string) {
	raw := attrs["RawMessageDelivery"] == "true"
	switch mode := r.cfg.Worker.SNS; {
	case mode == worker.SNSRaw && !raw:
		r.add(Finding{Severity: Error, Check: "sns.raw_delivery", Setting: "RawMessageDelivery of " + s.arn,
			Seen: "false", Want: "true (the worker's Config.SNS is SNSRaw)",
			Fix: "the worker would take the SNS envelope for the message and key it by the wrong id; aws sns set-subscription-attributes " +
				"--subscription-arn " + s.arn + " --attribute-name RawMessageDelivery --attribute-value true (terraform: raw_message_delivery = true), " +
				"or use worker.SNSAuto"})
	case mode == worker.SNSEnvelope && raw:
		r.add(Finding{Severity: Error, Check: "sns.raw_delivery", Setting: "RawMessageDelivery of " + s.arn,
			Seen: "true", Want: "false (the worker's Config.SNS is SNSEnvelope)",
			Fix: "every message would be refused and dead-lettered; aws sns set-subscription-attributes --subscription-arn " + s.arn +
				" --attribute-name RawMessageDelivery --attribute-value false (terraform: raw_message_delivery = false), or use worker.SNSAuto"})
	}
	fp := attrs["FilterPolicy"]
	if fp == "" || len(r.cfg.Routes) == 0 {
		return
	}
	if attrs["FilterPolicyScope"] == "MessageBody" {
		return // the router reads the type from a message attribute; a body filter is the user's own
	}
	var policy map[string]json.RawMessage
	if err := json.Unmarshal([]byte(fp), &policy); err != nil {
		r.add(Finding{Severity: Warning, Check: "sns.filter_policy", Setting: "FilterPolicy of " + s.arn,
			Seen: "unreadable JSON: " + oneLine(err), Want: "a policy doctor can read", Fix: "check the filter policy"})
		return
	}
	cond, ok := policy[r.cfg.TypeAttribute]
	if !ok {
		return
	}
	var values []any
	if err := json.Unmarshal(cond, &values); err != nil {
		return
	}
	var allowed []string
	for _, v := range values {
		str, ok := v.(string)
		if !ok {
			return // a numeric or operator condition: not evaluated here
		}
		allowed = append(allowed, str)
	}
	var dropped []string
	for _, t := range r.cfg.Routes {
		if !slices.Contains(allowed, t) {
			dropped = append(dropped, t)
		}
	}
	if len(dropped) > 0 {
		r.add(Finding{Severity: Error, Check: "sns.filter_policy", Setting: fmt.Sprintf("FilterPolicy %q of %s", r.cfg.TypeAttribute, s.arn),
			Seen: strings.Join(allowed, ", "), Want: "every routed type: " + strings.Join(r.cfg.Routes, ", "),
			Fix: "SNS never delivers the types " + strings.Join(dropped, ", ") + " to this queue though the router handles them; add them to the " +
				"filter policy (aws sns set-subscription-attributes --attribute-name FilterPolicy; terraform: filter_policy)"})
	}
}

// checkQueuePolicy checks that the queue's policy lets the subscription's topic send to it.
func (r *run) checkQueuePolicy(s snsSub) {
	q := r.queue
	doc := q.Attributes["Policy"]
	if policyAllowsTopic(doc, s.topic) {
		return
	}
	seen := "no statement allows it"
	if doc == "" {
		seen = "no policy"
	}
	r.add(Finding{Severity: Error, Check: "sns.queue_policy", Setting: "Policy of " + q.Name,
		Seen: seen, Want: "Allow sqs:SendMessage to the service sns.amazonaws.com with aws:SourceArn " + s.topic,
		Fix: "SNS cannot deliver the topic's messages, and drops them after its retries; terraform: aws_sqs_queue_policy " +
			"(terraform/modules/sns-fanout sets it), or aws sqs set-queue-attributes --attributes Policy=..."})
}

// policyAllowsTopic reports whether an IAM policy document allows topic to send to the queue:
// an Allow statement whose action covers sqs:SendMessage, whose principal is SNS (or anyone),
// and whose conditions, if any, name the topic in aws:SourceArn.
func policyAllowsTopic(doc, topic string) bool {
	var p struct {
		Statement json.RawMessage
	}
	if doc == "" || json.Unmarshal([]byte(doc), &p) != nil {
		return false
	}
	var stmts []policyStatement
	if json.Unmarshal(p.Statement, &stmts) != nil {
		var one policyStatement
		if json.Unmarshal(p.Statement, &one) != nil {
			return false
		}
		stmts = []policyStatement{one}
	}
	for _, st := range stmts {
		if st.Effect != "Allow" || !matchAny(st.Action, "sqs:SendMessage") || !st.principalSNS() {
			continue
		}
		if st.sourceARNMatches(topic) {
			return true
		}
	}
	return false
}

type policyStatement struct {
	Effect    string
	Action    stringList
	Principal json.RawMessage
	Condition map[string]map[string]stringList
}

func (st policyStatement) principalSNS() bool {
	var s string
	if json.Unmarshal(st.Principal, &s) == nil {
		return s == "*"
	}
	var m map[string]stringList
	if json.Unmarshal(st.Principal, &m) != nil {
		return false
	}
	return matchAny(m["Service"], "sns.amazonaws.com") || slices.Contains(m["AWS"], "*")
}

// sourceARNMatches reports whether the statement's conditions let topic through: no condition
// on the source, or aws:SourceArn equal to (or, with ArnLike/StringLike, matching) the topic.
func (st policyStatement) sourceARNMatches(topic string) bool {
	found := false
	for op, keys := range st.Condition {
		for k, vals := range keys {
			if !strings.EqualFold(k, "aws:SourceArn") {
				continue
			}
			found = true
			like := strings.Contains(op, "Like")
			if !slices.ContainsFunc(vals, func(v string) bool {
				if like {
					ok, _ := path.Match(v, topic)
					return ok
				}
				return v == topic
			}) {
				return false
			}
		}
	}
	return found || len(st.Condition) == 0
}

// stringList is an IAM policy value that is a string or a list of them.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*l = stringList{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return err
	}
	*l = ss
	return nil
}

// matchAny reports whether a pattern of list (IAM's * and ? wildcards, case-insensitive)
// matches s.
func matchAny(list []string, s string) bool {
	return slices.ContainsFunc(list, func(p string) bool {
		ok, _ := path.Match(strings.ToLower(p), strings.ToLower(s))
		return ok
	})
}
