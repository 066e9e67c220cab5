package reliability_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
)

// TestCheck feeds the checker observations with one known defect each.
func TestCheck(t *testing.T) {
	t.Parallel()
	ok := func(seq int64, key string) reliability.Send {
		return reliability.Send{Seq: seq, Key: key, Value: "v" + key, Kind: reliability.KindGood, Status: reliability.SendOK}
	}
	eff := func(key string) reliability.Effect {
		return reliability.Effect{Key: key, Value: "v" + key, Worker: "w"}
	}
	del := func(seq int64, key, st string) reliability.DeleteRecord {
		return reliability.DeleteRecord{Seq: seq, Key: key, Status: st}
	}
	// fifo adds two FIFO groups to o: g1, g2, g3 in group g and h1, h2 in group h, sent in that
	// order (interleaved), and effects committed in the order given, each "key#n" being the
	// effect of key as the n-th commit of its group.
	fifo := func(o *reliability.Observations, commits ...string) {
		for i, k := range []string{"g1", "h1", "g2", "h2", "g3"} {
			s := ok(int64(11+i), k)
			s.Group = k[:1]
			o.Sends = append(o.Sends, s)
		}
		for _, c := range commits {
			k, n, _ := strings.Cut(c, "#")
			e := eff(k)
			e.Group, e.GroupSeq = k[:1], int64(n[0]-'0')
			o.Effects = append(o.Effects, e)
		}
		o.TotalsSum = int64(len(o.Effects))
	}
	inOrder := []string{"g1#1", "h1#1", "g2#2", "h2#2", "g3#3"}
	base := func() reliability.Observations {
		return reliability.Observations{
			Sends:     []reliability.Send{ok(1, "a"), ok(2, "b"), {Seq: 3, Kind: reliability.KindMissingKey, Status: reliability.SendOK}},
			Effects:   []reliability.Effect{eff("a"), eff("b")},
			DLQ:       []reliability.DLQMessage{{Seq: 3}},
			Deletes:   []reliability.DeleteRecord{del(1, "a", reliability.DeleteCommitted), del(2, "b", reliability.DeleteCommitted)},
			TotalsSum: 2,
		}
	}
	tests := []struct {
		name    string
		mutate  func(o *reliability.Observations)
		problem string // "" means it must pass
		check   func(r reliability.Report) bool
	}{
		{name: "clean", mutate: func(*reliability.Observations) {}},
		{name: "lost", problem: "lost: 1", mutate: func(o *reliability.Observations) {
			o.Effects, o.TotalsSum = o.Effects[:1], 1
		}},
		{name: "good message in the DLQ is not lost", mutate: func(o *reliability.Observations) {
			o.Effects, o.TotalsSum = o.Effects[:1], 1
			o.DLQ = append(o.DLQ, reliability.DLQMessage{Seq: 2, Key: "b"})
		}, check: func(r reliability.Report) bool { return r.GoodInDLQ == 1 && r.ProcessedInDLQ == 0 }},
		{name: "poison not in the DLQ is lost", problem: "lost: 1", mutate: func(o *reliability.Observations) { o.DLQ = nil }},
		{name: "duplicate", problem: "duplicated keys: 1", mutate: func(o *reliability.Observations) {
			o.Effects, o.TotalsSum = append(o.Effects, eff("a")), 3
		}},
		{name: "unexpected", problem: "unexpected effects: 1", mutate: func(o *reliability.Observations) {
			o.Effects, o.TotalsSum = append(o.Effects, eff("zzz")), 3
		}},
		{name: "refused send effected", problem: "unexpected effects: 1", mutate: func(o *reliability.Observations) {
			o.Sends = append(o.Sends, reliability.Send{Seq: 9, Key: "c", Kind: reliability.KindGood, Status: reliability.SendFailed})
			o.Effects, o.TotalsSum = append(o.Effects, eff("c")), 3
		}},
		{name: "unknown send effected once is fine", mutate: func(o *reliability.Observations) {
			o.Sends = append(o.Sends, reliability.Send{Seq: 9, Key: "c", Kind: reliability.KindGood, Status: reliability.SendUnknown},
				reliability.Send{Seq: 10, Key: "d", Kind: reliability.KindGood, Status: reliability.SendUnknown})
			o.Effects, o.TotalsSum = append(o.Effects, eff("c")), 3
		}, check: func(r reliability.Report) bool { return r.UnknownSends == 2 && r.UnknownEffected == 1 }},
		{name: "delete before commit", problem: "deletes not preceded by a committed inbox row: 1", mutate: func(o *reliability.Observations) {
			o.Deletes = append(o.Deletes, del(1, "a", reliability.DeleteMissing))
		}},
		{name: "delete after unknown commit", problem: "deletes not preceded by a committed inbox row: 1", mutate: func(o *reliability.Observations) {
			o.Deletes = append(o.Deletes, del(1, "a", reliability.DeleteAfterUnknownCommit))
		}},
		{name: "delete of a message without key", problem: "deletes not preceded by a committed inbox row: 1", mutate: func(o *reliability.Observations) {
			o.Deletes = append(o.Deletes, del(3, "", reliability.DeleteNoKey))
		}},
		{name: "unverified delete of a committed key is fine", mutate: func(o *reliability.Observations) {
			o.Deletes = append(o.Deletes, del(1, "a", reliability.DeleteUnverified))
		}, check: func(r reliability.Report) bool { return r.DeletesUnverified == 1 }},
		{name: "unverified delete never committed", problem: "deletes not preceded by a committed inbox row: 1", mutate: func(o *reliability.Observations) {
			o.Sends = append(o.Sends, ok(9, "c"))
			o.DLQ = append(o.DLQ, reliability.DLQMessage{Seq: 9, Key: "c"})
			o.Deletes = append(o.Deletes, del(9, "c", reliability.DeleteUnverified))
		}},
		// A second effect after a redrive is also a duplicate.
		{name: "redrive made a second effect", problem: "second effects after redrive: 1", mutate: func(o *reliability.Observations) {
			o.Redriven, o.EffectsBeforeRedrive = []string{"a"}, 1
			o.Effects, o.TotalsSum = append(o.Effects, eff("a")), 3
		}},
		{name: "business write mismatch", problem: "business write mismatch: 1", mutate: func(o *reliability.Observations) { o.TotalsSum = 3 }},
		{name: "FIFO groups committed in send order", mutate: func(o *reliability.Observations) {
			fifo(o, inOrder...)
		}, check: func(r reliability.Report) bool { return r.Groups == 2 && r.Misordered == 0 && r.Effected == 7 }},
		// The rows' order in the log does not matter, only each group's commit numbers.
		{name: "FIFO commit numbers decide, not the log's order", mutate: func(o *reliability.Observations) {
			fifo(o, "g3#3", "h2#2", "g2#2", "h1#1", "g1#1")
		}, check: func(r reliability.Report) bool { return r.Groups == 2 && r.Misordered == 0 }},
		{name: "FIFO commit out of send order", problem: "effects committed out of send order in their group: 1", mutate: func(o *reliability.Observations) {
			fifo(o, "g1#1", "h1#1", "g3#2", "h2#2", "g2#3")
		}},
		{name: "FIFO head committed last", problem: "effects committed out of send order in their group: 1", mutate: func(o *reliability.Observations) {
			fifo(o, "g2#1", "h1#1", "g3#2", "h2#2", "g1#3")
		}},
		{name: "FIFO effect in another group than its send", problem: "effects committed out of send order in their group: 1", mutate: func(o *reliability.Observations) {
			fifo(o, "g1#1", "h1#1", "g2#2", "h2#2", "g3#3")
			o.Effects[len(o.Effects)-3].Group = "h" // g2 recorded in group h, at its end
			o.Effects[len(o.Effects)-3].GroupSeq = 3
		}},
		{name: "FIFO interleaving across groups is free", mutate: func(o *reliability.Observations) {
			fifo(o, "h2#2", "g3#3", "h1#1", "g2#2", "g1#1")
		}},
		// A redrive puts an event behind its group by policy.
		{name: "FIFO redriven event committed last", mutate: func(o *reliability.Observations) {
			fifo(o, "g1#1", "h1#1", "g3#2", "h2#2", "g2#3")
			o.Redriven, o.EffectsBeforeRedrive = []string{"g2"}, 1
		}},
		// A send the queue refused has no place: the retry's place counts.
		{name: "FIFO refused first send", mutate: func(o *reliability.Observations) {
			fifo(o, "g1#1", "h1#1", "g3#2", "h2#2", "g2#3")
			for i := range o.Sends {
				if o.Sends[i].Key == "g2" {
					o.Sends[i].Status = reliability.SendFailed
				}
			}
			o.Sends = append(o.Sends, reliability.Send{Seq: 16, Key: "g2", Value: "vg2", Kind: reliability.KindGood, Group: "g", Status: reliability.SendOK})
		}},
		// A retry after an unknown outcome (deduplicated by the queue) keeps the first place.
		{name: "FIFO retried unknown send keeps its place", problem: "effects committed out of send order in their group: 1", mutate: func(o *reliability.Observations) {
			fifo(o, "g1#1", "h1#1", "g3#2", "h2#2", "g2#3")
			for i := range o.Sends {
				if o.Sends[i].Key == "g2" {
					o.Sends[i].Status = reliability.SendUnknown
				}
			}
			o.Sends = append(o.Sends, reliability.Send{Seq: 16, Key: "g2", Value: "vg2", Kind: reliability.KindGood, Group: "g", Status: reliability.SendOK})
		}},
		// With an expectation of which events end in the DLQ (misbehaving handlers): "b" must.
		{name: "expected end in the DLQ", mutate: func(o *reliability.Observations) {
			o.ExpectDLQ = func(k string) bool { return k == "b" }
			o.Effects, o.TotalsSum = o.Effects[:1], 1
			o.Deletes = o.Deletes[:1]
			o.DLQ = append(o.DLQ, reliability.DLQMessage{Seq: 2, Key: "b"})
		}, check: func(r reliability.Report) bool { return r.ExpectedDLQ == 1 && r.WrongEnd == 0 && r.GoodInDLQ == 1 }},
		{name: "expected in the DLQ but applied", problem: "events that did not end as expected (applied once, or in the DLQ unapplied): 1", mutate: func(o *reliability.Observations) {
			o.ExpectDLQ = func(k string) bool { return k == "b" }
		}},
		{name: "expected in the DLQ, applied and there", problem: "events that did not end as expected (applied once, or in the DLQ unapplied): 1", mutate: func(o *reliability.Observations) {
			o.ExpectDLQ = func(k string) bool { return k == "b" }
			o.DLQ = append(o.DLQ, reliability.DLQMessage{Seq: 2, Key: "b"})
		}},
		{name: "expected applied but in the DLQ", problem: "events that did not end as expected (applied once, or in the DLQ unapplied): 1", mutate: func(o *reliability.Observations) {
			o.ExpectDLQ = func(k string) bool { return false }
			o.Effects, o.TotalsSum = o.Effects[:1], 1
			o.Deletes = o.Deletes[:1]
			o.DLQ = append(o.DLQ, reliability.DLQMessage{Seq: 2, Key: "b"})
		}},
		{name: "expected in the DLQ, sent only with unknown outcome, vanished", mutate: func(o *reliability.Observations) {
			o.ExpectDLQ = func(k string) bool { return k == "c" }
			o.Sends = append(o.Sends, reliability.Send{Seq: 9, Key: "c", Kind: reliability.KindGood, Status: reliability.SendUnknown})
		}, check: func(r reliability.Report) bool { return r.ExpectedDLQ == 0 && r.WrongEnd == 0 }},
		// An offloaded event must be applied with one of the payloads sent for it, not its pointer.
		{name: "offloaded event applied with its payload", mutate: func(o *reliability.Observations) {
			o.Sends[1].Payload = "sha-b1"
			o.Sends = append(o.Sends, reliability.Send{Seq: 9, Key: "b", Kind: reliability.KindGood, Status: reliability.SendOK, Payload: "sha-b2"})
			o.Effects[1].BodySHA = "sha-b2"
		}, check: func(r reliability.Report) bool { return r.Offloaded == 1 && r.OffloadedApplied == 1 }},
		{name: "offloaded event applied with its pointer", problem: "effects of offloaded events whose handler did not see the payload: 1", mutate: func(o *reliability.Observations) {
			o.Sends[1].Payload = "sha-b1"
			o.Effects[1].BodySHA = "sha-of-the-pointer"
		}, check: func(r reliability.Report) bool { return r.Offloaded == 1 && r.OffloadedApplied == 0 }},
		{name: "redeliveries counted", mutate: func(o *reliability.Observations) {
			o.Deletes = append(o.Deletes, del(1, "", reliability.Received), del(1, "", reliability.Received), del(2, "", reliability.Received))
		}, check: func(r reliability.Report) bool { return r.Redelivered == 1 && r.Deletes == 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.mutate(&o)
			r := reliability.Check(o)
			p := r.Problems()
			switch {
			case tt.problem == "" && len(p) > 0:
				t.Errorf("problems %q, want none\n%s", p, r.String())
			case tt.problem != "" && !slices.Contains(p, tt.problem):
				t.Errorf("problems %q, want %q\n%s", p, tt.problem, r.String())
			case tt.problem != "" && len(p) != 1 && !strings.HasPrefix(tt.problem, "second effects"):
				t.Errorf("problems %q, want only %q", p, tt.problem)
			}
			if tt.check != nil && !tt.check(r) {
				t.Errorf("counts wrong:\n%s", r.String())
			}
			if !strings.Contains(r.String(), "scenario") {
				t.Errorf("no table header in %q", r.String())
			}
		})
	}
}
