package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
)

// SQS publishes the age of a queue's oldest message only to CloudWatch. Reading it from the
// queue instead would take a receive, which counts against maxReceiveCount.
const (
	// ageTimeout bounds the whole CloudWatch call: stats must not hang on a missing endpoint,
	// credentials that IMDS never answers for, or an emulator without CloudWatch.
	ageTimeout = 5 * time.Second
	// ageWindow is how far back the newest datapoint is looked for.
	ageWindow = 15 * time.Minute
	// agePeriod is the metric's resolution: SQS publishes it once a minute.
	agePeriod = 60 * time.Second
)

// queueAge is the newest ApproximateAgeOfOldestMessage datapoint of one queue; found is false
// when CloudWatch has none in the window.
type queueAge struct {
	age   time.Duration
	at    time.Time
	found bool
}

// text is the OLDEST AGE cell.
func (a queueAge) text() string {
	if !a.found {
		return fmt.Sprintf("no datapoint in the last %d min", int(ageWindow.Minutes()))
	}
	return a.age.String() + " as of " + a.at.UTC().Format(time.RFC3339)
}

// oldestAges reads ApproximateAgeOfOldestMessage (namespace AWS/SQS, dimension QueueName,
// statistic Maximum per minute, the last 15 minutes) for each queue in one GetMetricData call,
// and returns the newest datapoint of each, in the order of names.
func oldestAges(ctx context.Context, cfg aws.Config, names []string) ([]queueAge, error) {
	ctx, cancel := context.WithTimeout(ctx, ageTimeout)
	defer cancel()
	cw := cloudwatch.NewFromConfig(cfg, func(o *cloudwatch.Options) {
		// One attempt: the retryer's backoff would spend the timeout and hide the first error.
		o.RetryMaxAttempts = 1
	})
	// EndTime is exclusive: end at the next whole minute so the current one counts.
	end := time.Now().UTC().Truncate(agePeriod).Add(agePeriod)
	in := &cloudwatch.GetMetricDataInput{
		StartTime: aws.Time(end.Add(-ageWindow)),
		EndTime:   aws.Time(end),
		ScanBy:    types.ScanByTimestampDescending,
	}
	index := map[string]int{}
	for i, name := range names {
		id := fmt.Sprintf("q%d", i)
		index[id] = i
		in.MetricDataQueries = append(in.MetricDataQueries, types.MetricDataQuery{
			Id: aws.String(id),
			MetricStat: &types.MetricStat{
				Metric: &types.Metric{
					Namespace:  aws.String("AWS/SQS"),
					MetricName: aws.String("ApproximateAgeOfOldestMessage"),
					Dimensions: []types.Dimension{{Name: aws.String("QueueName"), Value: aws.String(name)}},
				},
				Period: aws.Int32(int32(agePeriod.Seconds())),
				Stat:   aws.String("Maximum"),
			},
		})
	}
	ages := make([]queueAge, len(names))
	pages := cloudwatch.NewGetMetricDataPaginator(cw, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range out.MetricDataResults {
			i, ok := index[aws.ToString(r.Id)]
			if !ok {
				continue
			}
			for j, at := range r.Timestamps {
				if j < len(r.Values) && (!ages[i].found || at.After(ages[i].at)) {
					secs := time.Duration(r.Values[j] * float64(time.Second))
					ages[i] = queueAge{age: secs.Round(time.Second), at: at, found: true}
				}
			}
		}
	}
	return ages, nil
}

// ageUnavailable says in a few words why CloudWatch gave no answer: the operator needs the cause,
// not the SDK's chain of wrappers.
func ageUnavailable(err error) string {
	var (
		ae   smithy.APIError
		re   *awshttp.ResponseError
		nerr *net.OpError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("CloudWatch did not answer within %v", ageTimeout)
	case errors.As(err, &nerr):
		return "cannot reach CloudWatch: " + nerr.Error()
	case errors.As(err, &ae) && ae.ErrorCode() != "UnknownError":
		return "CloudWatch: " + apiError(err)
	case errors.As(err, &re) && re.HTTPStatusCode()/100 == 2:
		// The endpoint answered, but not as CloudWatch does: a local SQS server (fauxqs, GoAws)
		// serves no CloudWatch, and its answer does not decode.
		return fmt.Sprintf("the CloudWatch endpoint answered HTTP %d with something that is not a CloudWatch answer "+
			"(a local SQS server without CloudWatch?); --no-age skips the age", re.HTTPStatusCode())
	case errors.As(err, &re) && re.HTTPStatusCode() != 0:
		return fmt.Sprintf("CloudWatch answered HTTP %d", re.HTTPStatusCode())
	case strings.Contains(err.Error(), "credentials"):
		return "no AWS credentials found for CloudWatch"
	}
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return "CloudWatch: " + oneLine(err)
}
