package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestGrouplessWarning (every server: GoAws or fauxqs, and the fake): a worker with MaxPerGroup
// set that receives more than GrouplessWarnAfter messages, none with a MessageGroupId, logs one
// warning naming MaxPerGroup and MessageGroupId; without MaxPerGroup it logs none. Messages sent
// with group ids warn only where the server drops the id on a standard queue (GoAws, fauxqs),
// which is what a user of those servers sees; where it keeps it (the fake, SQS) they do not.
func TestGrouplessWarning(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		n := 2*worker.GrouplessWarnAfter + 50
		for _, tc := range []struct {
			name        string
			maxPerGroup int
			groups      bool
			want        int
		}{
			{"capped, no group ids", 3, false, 1},
			{"uncapped, no group ids", 0, false, 0},
			{"capped, group ids sent", 3, true, map[bool]int{true: 0, false: 1}[s.has(sqstest.FairGroups)]},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := s.bundle(t, sqsfake.QueueOptions{})
				msgs := bodies(n, "m-")
				if tc.groups {
					for i := range msgs {
						msgs[i].GroupID = fmt.Sprintf("tenant-%d", i%3)
					}
				}
				b.send(t, msgs)
				var logs sqstest.Buffer
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 4, MaxPerGroup: tc.maxPerGroup,
					Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
					Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
				b.waitDeleted(t, 60*time.Second)
				workertest.Stop(t, w)

				var got []string
				for line := range strings.SplitSeq(logs.String(), "\n") {
					var rec struct {
						Level string `json:"level"`
						Msg   string `json:"msg"`
						Max   int    `json:"max_per_group"`
					}
					if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, "MessageGroupId") {
						got = append(got, line)
						if rec.Level != "WARN" || !strings.Contains(rec.Msg, "MaxPerGroup") || rec.Max != tc.maxPerGroup {
							t.Errorf("the warning is not a WARN naming MaxPerGroup with max_per_group %d: %s", tc.maxPerGroup, line)
						}
					}
				}
				if len(got) != tc.want {
					t.Errorf("%d group-id warnings after %d messages, want %d:\n%s", len(got), n, tc.want, strings.Join(got, "\n"))
				}
			})
		}
	})
}
