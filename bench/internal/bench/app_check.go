package bench

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// The app scenario's history and its offline checker.
//
// While the scenario runs, appHistory records every send to the first queue
// (committed, or of unknown outcome when Send returned an error), every
// atomic ack+send of the first fan-out group into the second queue, and
// every handler start and end in each group, in one total order (the index
// of the event: events are appended under one lock, by the goroutine that
// observed them, so an event that happened after another in real time has
// a higher index). After the run, checkApp compares that history with the
// dead letters and the engine's pending counts and reports:
//
//   - loss: a message committed to a queue that a group neither completed
//     (a handler succeeded) nor dead-lettered, beyond what the engine still
//     holds for that group (the drain ran out of time);
//   - duplicates: a message that succeeded more than once in one group;
//     allowed only when the group's worker reported a failed ack, nack or
//     lease renewal (then the outcome of an ack was uncertain and the
//     message could come back), a violation otherwise;
//   - overlap: a delivery that started while an earlier delivery of the same
//     message to the same group was still running (two valid leases);
//   - order, per group and key (the producers send each key's messages one
//     at a time, numbering them 1, 2, ...): a message's handler started
//     before every earlier message of its key was finished in that group
//     (succeeded, or failed its last attempt), or a message succeeded after
//     a later one of its key had succeeded;
//   - dead letters: a poison message not dead-lettered in a fan-out group,
//     or with other than max attempts; any other message dead-lettered;
//   - forwards: a message flagged for the atomic ack+send whose group
//     completion did not produce exactly one message in the second queue,
//     or a forward of a message not flagged;
//   - phantoms: a delivered message that no send (or forward) accounts for.

// Groups of the app scenario, by index in appHistory and appCheck.
const (
	appGroupA      = 0 // first fan-out group of the first queue: forwards
	appGroupB      = 1 // second fan-out group of the first queue
	appGroupStage2 = 2 // the only group of the second queue
	appGroups      = 3
)

// appSend is one send to the first queue.
type appSend struct {
	ID     int64         // the message id (0 when Err)
	Key    int32         // ordering key number
	Seq    int64         // the key's sequence number, from 1
	Poison bool          // the handler always fails it
	Fwd    bool          // group A completes it with an atomic ack+send
	At     time.Duration // when the send started, since the run started
	Err    bool          // Send returned an error: committed or not, unknown
}

// appForward is one atomic ack+send of group A into the second queue.
type appForward struct {
	Src int64         // the message of the first queue acked
	ID  int64         // the message sent to the second queue (0 when Err)
	At  time.Duration // when the transaction committed
	Err bool          // the transaction failed: committed or not, unknown
}

// Kinds of appEvent.
const (
	evStart = iota // a handler started
	evOK           // it returned nil: the worker acks
	evFail         // it returned an error: the worker nacks
	evAbort        // it was cancelled at shutdown: the worker gives it back
)

// appEvent is one handler start or end. Its place in appHistory.events is
// its clock.
type appEvent struct {
	Kind    uint8
	Group   uint8
	Attempt int32
	Key     int32
	ID      int64 // message id in its queue
	Src     int64 // stage 2: the message of the first queue it forwards
	Seq     int64
	At      time.Duration
}

// appHistory is what the app scenario records; safe for concurrent use.
type appHistory struct {
	started time.Time

	mu     sync.Mutex
	sends  []appSend
	fwds   []appForward
	events []appEvent
}

func newAppHistory() *appHistory { return &appHistory{started: time.Now()} }

func (h *appHistory) since() time.Duration { return time.Since(h.started) }

func (h *appHistory) send(s appSend) {
	h.mu.Lock()
	h.sends = append(h.sends, s)
	h.mu.Unlock()
}

func (h *appHistory) forward(f appForward) {
	h.mu.Lock()
	f.At = h.since()
	h.fwds = append(h.fwds, f)
	h.mu.Unlock()
}

func (h *appHistory) event(e appEvent) {
	h.mu.Lock()
	e.At = h.since()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// appCheckInput is everything the checker looks at.
type appCheckInput struct {
	MaxAttempts int
	Sends       []appSend
	Forwards    []appForward
	Events      []appEvent
	// Dead maps, per group, the id of each dead letter to its attempts.
	Dead [appGroups]map[int64]int
	// Pending is, per group, what the engine still holds at the end
	// (ready + waiting + delayed + in flight: sluice.Status.Pending).
	Pending [appGroups]int64
	// WorkerErrors counts, per group, the failed acks, nacks, lease
	// renewals and receives its worker reported: the acks whose outcome was
	// uncertain.
	WorkerErrors [appGroups]int64
}

// appGroupCheck is the checker's account of one group.
type appGroupCheck struct {
	Expected     int64   `json:"expected"`      // messages the group must finish
	Completed    int64   `json:"completed"`     // of them, succeeded at least once
	Dead         int64   `json:"dead_lettered"` // of them, dead-lettered
	Unfinished   int64   `json:"unfinished"`    // neither
	Pending      int64   `json:"pending"`       // what the engine still holds
	Lost         int64   `json:"lost"`          // unfinished beyond pending
	Duplicates   int64   `json:"duplicates"`    // extra successes
	Order        int64   `json:"order_violations"`
	Other        int64   `json:"other_violations"` // overlap, dead letter, phantom, forward
	Deliveries   int64   `json:"deliveries"`       // handler starts
	Redeliveries int64   `json:"redeliveries"`     // starts beyond the first of a message
	Unhandled    int64   `json:"unhandled"`        // attempts spent without a handler run (lease expiry)
	Failures     int64   `json:"failures"`         // handler failures
	Latency      Latency `json:"delivery_latency"` // send (or forward) → first handler start
}

// appCheck is the checker's verdict.
type appCheck struct {
	Groups        [appGroups]appGroupCheck `json:"groups"`
	Sent          int64                    `json:"sent"`            // committed sends to the first queue
	SendErrors    int64                    `json:"send_errors"`     // sends of unknown outcome
	Recovered     int64                    `json:"recovered_sends"` // of them, delivered: they committed
	Poison        int64                    `json:"poison"`          // poison messages sent
	Forwards      int64                    `json:"forwards"`        // committed atomic ack+sends
	ForwardErrors int64                    `json:"forward_errors"`  // of unknown outcome
	// Violations by kind; all zero when the run was correct.
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicate_violations"` // duplicates with no uncertain ack to explain them
	Order      int64 `json:"order_violations"`
	Overlap    int64 `json:"overlap_violations"`
	DeadLetter int64 `json:"dead_letter_violations"`
	Forward    int64 `json:"forward_violations"`
	Phantom    int64 `json:"phantom_violations"`
	// Behind lists, per group, the keys with messages the group had not
	// finished (neither completed nor dead-lettered) when the run ended,
	// the most such messages first, at most maxAppBehind keys: what the
	// drain had not reached yet, when the drain limit ended the run.
	Behind [appGroups][]appKeyCount `json:"behind,omitempty"`
	// BehindKeys counts, per group, every key with unfinished messages.
	BehindKeys [appGroups]int `json:"behind_keys,omitempty"`
	// Details describes the first violations.
	Details []string `json:"details,omitempty"`
}

// appKeyCount is a key and a number of its messages.
type appKeyCount struct {
	Key      int32 `json:"key"` // -1: a stage-2 message whose source is unknown
	Messages int64 `json:"messages"`
}

// maxAppBehind bounds each group's appCheck.Behind.
const maxAppBehind = 5

// behind returns the keys of unfinished, the most messages first (then by
// key), at most maxAppBehind, and how many keys there are.
func behind(unfinished []*appMsg) ([]appKeyCount, int) {
	if len(unfinished) == 0 {
		return nil, 0
	}
	byKey := map[int32]int64{}
	for _, m := range unfinished {
		byKey[m.key]++
	}
	out := make([]appKeyCount, 0, len(byKey))
	for k, n := range byKey {
		out = append(out, appKeyCount{Key: k, Messages: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Messages != out[j].Messages {
			return out[i].Messages > out[j].Messages
		}
		return out[i].Key < out[j].Key
	})
	return out[:min(len(out), maxAppBehind)], len(out)
}

// violations is the number of violations of every kind.
func (c *appCheck) violations() int64 {
	return c.Lost + c.Duplicates + c.Order + c.Overlap + c.DeadLetter + c.Forward + c.Phantom
}

// ok reports whether the run was correct.
func (c *appCheck) ok() bool { return c.violations() == 0 }

// maxAppDetails bounds appCheck.Details.
const maxAppDetails = 20

// appMsg is the checker's state of one message in one group.
type appMsg struct {
	id, src     int64
	key         int32
	seq         int64
	poison, fwd bool
	sentAt      time.Duration
	starts, oks int64
	maxAttempt  int32 // highest attempt of its handler starts
	fails       int64
	open        bool // a start without its end yet
	firstStart  int  // clock of the first start, -1 if none
	finish      int  // clock of the first success or last-attempt failure, -1 if none
}

// checkApp checks a history (see the comment at the top of the file).
func checkApp(in appCheckInput) *appCheck {
	c := &appCheck{}
	report := func(counter *int64, format string, args ...any) {
		*counter++
		if len(c.Details) < maxAppDetails {
			c.Details = append(c.Details, fmt.Sprintf(format, args...))
		}
	}
	// other reports a violation of group g that is neither a loss nor an
	// order violation.
	other := func(g int, counter *int64, format string, args ...any) {
		c.Groups[g].Other++
		report(counter, format, args...)
	}
	groupName := func(g int) string { return appGroupNames[g] }

	// The messages each group must finish: committed sends (and forwards),
	// plus those of unknown outcome that some group received.
	sent := map[int64]*appSend{}
	uncertain := map[[2]int64]*appSend{} // (key, seq)
	for i := range in.Sends {
		s := &in.Sends[i]
		if s.Err {
			c.SendErrors++
			uncertain[[2]int64{int64(s.Key), s.Seq}] = s
			continue
		}
		c.Sent++
		sent[s.ID] = s
		if s.Poison {
			c.Poison++
		}
	}
	fwd := map[int64]*appForward{}      // by id in the second queue
	fwdBySrc := map[int64][]int64{}     // committed forwards by source
	uncertainFwd := map[int64]bool{}    // sources of forwards of unknown outcome
	seenFwdBySrc := map[int64][]int64{} // second-queue messages stage 2 received, by source
	for i := range in.Forwards {
		f := &in.Forwards[i]
		if f.Err {
			c.ForwardErrors++
			uncertainFwd[f.Src] = true
			continue
		}
		c.Forwards++
		fwd[f.ID] = f
		fwdBySrc[f.Src] = append(fwdBySrc[f.Src], f.ID)
	}

	var msgs [appGroups]map[int64]*appMsg
	for g := range msgs {
		msgs[g] = map[int64]*appMsg{}
	}
	newMsg := func(id int64, key int32, seq int64) *appMsg {
		return &appMsg{id: id, key: key, seq: seq, firstStart: -1, finish: -1}
	}
	for _, s := range sent {
		for g := range appGroupStage2 {
			m := newMsg(s.ID, s.Key, s.Seq)
			m.poison, m.fwd, m.sentAt = s.Poison, s.Fwd, s.At
			msgs[g][s.ID] = m
		}
	}
	for _, f := range fwd {
		m := newMsg(f.ID, -1, 0)
		m.src, m.sentAt = f.Src, f.At
		if s := sent[f.Src]; s != nil {
			m.key, m.seq = s.Key, s.Seq
		}
		msgs[appGroupStage2][f.ID] = m
	}

	// One pass over the events, in clock order.
	recovered := map[int64]bool{}
	phantom := map[[2]int64]bool{} // (group, id) reported
	for clock, e := range in.Events {
		g := int(e.Group)
		m := msgs[g][e.ID]
		if m == nil {
			switch {
			case g != appGroupStage2 && uncertain[[2]int64{int64(e.Key), e.Seq}] != nil:
				// A send of unknown outcome that committed: every fan-out
				// group must finish it.
				s := uncertain[[2]int64{int64(e.Key), e.Seq}]
				recovered[e.ID] = true
				for gg := range appGroupStage2 {
					if msgs[gg][e.ID] == nil {
						mm := newMsg(e.ID, e.Key, e.Seq)
						mm.poison, mm.fwd, mm.sentAt = s.Poison, s.Fwd, s.At
						msgs[gg][e.ID] = mm
					}
				}
				m = msgs[g][e.ID]
			case g == appGroupStage2 && uncertainFwd[e.Src]:
				m = newMsg(e.ID, e.Key, e.Seq)
				m.src, m.sentAt = e.Src, -1
				msgs[g][e.ID] = m
			default:
				if !phantom[[2]int64{int64(g), e.ID}] {
					phantom[[2]int64{int64(g), e.ID}] = true
					other(g, &c.Phantom, "group %s: message %d (key %d, seq %d) delivered, but no committed send accounts for it", groupName(g), e.ID, e.Key, e.Seq)
				}
				continue
			}
		}
		switch e.Kind {
		case evStart:
			if m.open {
				other(g, &c.Overlap, "group %s: message %d delivered again (attempt %d, clock %d) while its previous delivery was still running", groupName(g), e.ID, e.Attempt, clock)
			}
			m.open = true
			m.starts++
			m.maxAttempt = max(m.maxAttempt, e.Attempt)
			if m.firstStart < 0 {
				m.firstStart = clock
			}
			if g == appGroupStage2 && m.starts == 1 {
				seenFwdBySrc[m.src] = append(seenFwdBySrc[m.src], m.id)
			}
		case evOK:
			m.open = false
			m.oks++
			if m.finish < 0 {
				m.finish = clock
			}
		case evFail:
			m.open = false
			m.fails++
			if int(e.Attempt) >= in.MaxAttempts && m.finish < 0 {
				m.finish = clock
			}
		case evAbort:
			m.open = false
		}
	}
	c.Recovered = int64(len(recovered))

	// Per group: completion, loss, duplicates, dead letters, order.
	for g := range appGroups {
		gc := &c.Groups[g]
		ids := make([]int64, 0, len(msgs[g]))
		for id := range msgs[g] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var lat []float64
		var unfinished []*appMsg
		for _, id := range ids {
			m := msgs[g][id]
			gc.Expected++
			gc.Deliveries += m.starts
			gc.Redeliveries += max(m.starts-1, 0)
			gc.Failures += m.fails
			gc.Unhandled += max(int64(m.maxAttempt)-m.starts, 0)
			if m.firstStart >= 0 && m.sentAt >= 0 {
				lat = append(lat, float64(in.Events[m.firstStart].At-m.sentAt)/float64(time.Millisecond))
			}
			attempts, dead := in.Dead[g][id]
			switch {
			case dead && !m.poison:
				other(g, &c.DeadLetter, "group %s: message %d (key %d, seq %d) dead-lettered after %d attempts, but it is not poison", groupName(g), id, m.key, m.seq, attempts)
			case dead && attempts != in.MaxAttempts:
				other(g, &c.DeadLetter, "group %s: poison message %d dead-lettered after %d attempts, want %d", groupName(g), id, attempts, in.MaxAttempts)
			case dead && (m.starts > int64(in.MaxAttempts) || m.maxAttempt != int32(in.MaxAttempts) && in.Pending[g] == 0):
				// Its last delivery must be attempt max_attempts and fail.
				// (Fewer handler runs than attempts are possible: a delivery
				// the worker never handled comes back by lease expiry, and
				// one given back at shutdown spends an attempt too.)
				other(g, &c.DeadLetter, "group %s: poison message %d dead-lettered after %d handler runs, the last at attempt %d, want attempt %d", groupName(g), id, m.starts, m.maxAttempt, in.MaxAttempts)
			case !dead && m.poison && m.fails >= int64(in.MaxAttempts):
				other(g, &c.DeadLetter, "group %s: poison message %d failed %d times but is not a dead letter", groupName(g), id, m.fails)
			}
			completed := m.oks > 0
			if g == appGroupA && m.fwd && !completed && (len(fwdBySrc[id]) > 0 || len(seenFwdBySrc[id]) > 0) {
				// Its ack+send committed though the handler saw an error.
				completed = true
			}
			switch {
			case completed:
				gc.Completed++
			case dead:
				gc.Dead++
			default:
				gc.Unfinished++
				unfinished = append(unfinished, m)
			}
			if m.oks > 1 {
				gc.Duplicates += m.oks - 1
			}
		}
		for id, attempts := range in.Dead[g] {
			if msgs[g][id] == nil {
				other(g, &c.DeadLetter, "group %s: dead letter %d (%d attempts) is no message that was sent", groupName(g), id, attempts)
			}
		}
		slices.Sort(lat)
		gc.Latency = Summarize(lat)
		gc.Pending = in.Pending[g]
		c.Behind[g], c.BehindKeys[g] = behind(unfinished)
		gc.Lost = max(gc.Unfinished-gc.Pending, 0)
		if gc.Lost > 0 {
			c.Lost += gc.Lost
			for i, m := range unfinished {
				if i == 3 || len(c.Details) >= maxAppDetails {
					break
				}
				c.Details = append(c.Details, fmt.Sprintf("group %s: message %d (key %d, seq %d) never finished (%d deliveries, %d failures)", groupName(g), m.id, m.key, m.seq, m.starts, m.fails))
			}
			if len(c.Details) < maxAppDetails {
				c.Details = append(c.Details, fmt.Sprintf("group %s: %d messages unfinished, the engine holds %d: %d lost", groupName(g), gc.Unfinished, gc.Pending, gc.Lost))
			}
		}
		if gc.Duplicates > 0 && in.WorkerErrors[g] == 0 {
			other(g, &c.Duplicates, "group %s: %d extra successes, and the worker reported no failed ack that could explain them", groupName(g), gc.Duplicates)
		}
		gc.Order = checkAppOrder(g, msgs[g], in.Events, func(format string, args ...any) { report(&c.Order, format, args...) })
	}

	// Forwards: exactly one second-queue message per flagged message that
	// group A completed, none for the others.
	srcs := map[int64]bool{}
	for src := range fwdBySrc {
		srcs[src] = true
	}
	for src := range seenFwdBySrc {
		srcs[src] = true
	}
	for id, m := range msgs[appGroupA] {
		if m.fwd && (m.oks > 0 || srcs[id]) {
			srcs[id] = true
		}
	}
	srcList := make([]int64, 0, len(srcs))
	for src := range srcs {
		srcList = append(srcList, src)
	}
	slices.Sort(srcList)
	for _, src := range srcList {
		m := msgs[appGroupA][src]
		ids := map[int64]bool{}
		for _, id := range fwdBySrc[src] {
			ids[id] = true
		}
		for _, id := range seenFwdBySrc[src] {
			ids[id] = true
		}
		switch {
		case m == nil || !m.fwd:
			other(appGroupA, &c.Forward, "message %d was forwarded to the second queue (%d times) but is not flagged for it", src, len(ids))
		case len(ids) == 0:
			other(appGroupA, &c.Forward, "message %d (key %d, seq %d) completed in group %s without its atomic forward", src, m.key, m.seq, groupName(appGroupA))
		case len(ids) > 1:
			other(appGroupA, &c.Forward, "message %d forwarded %d times: second-queue messages %v", src, len(ids), sortedKeys(ids))
		}
	}
	return c
}

// checkAppOrder checks the per-key order of group g and returns the number
// of violations: each message whose handler started before an earlier
// message of its key had finished in g, and each success that came after a
// later message of its key had succeeded.
func checkAppOrder(g int, msgs map[int64]*appMsg, events []appEvent, report func(format string, args ...any)) int64 {
	byKey := map[int32][]*appMsg{}
	for _, m := range msgs {
		if m.key >= 0 {
			byKey[m.key] = append(byKey[m.key], m)
		}
	}
	keys := make([]int32, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The starts and successes of each message, in clock order.
	type ev struct {
		clock int
		kind  uint8
	}
	evs := map[int64][]ev{}
	for clock, e := range events {
		if int(e.Group) == g && (e.Kind == evStart || e.Kind == evOK) {
			evs[e.ID] = append(evs[e.ID], ev{clock, e.Kind})
		}
	}
	var n int64
	for _, k := range keys {
		ms := byKey[k]
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].seq != ms[j].seq {
				return ms[i].seq < ms[j].seq
			}
			return ms[i].id < ms[j].id
		})
		// 1. A start must come after every earlier message's finish.
		prefix := -1  // the latest finish among earlier messages
		blocker := -1 // its index in ms
		unfinished := false
		for i, m := range ms {
			if i > 0 && ms[i-1].seq == m.seq {
				// Duplicate messages of one (key, seq) (only a forward
				// committed twice): no order between them.
				continue
			}
			for _, e := range evs[m.id] {
				if e.kind != evStart {
					continue
				}
				if unfinished || e.clock < prefix {
					n++
					b := ms[blocker]
					state := fmt.Sprintf("finished at clock %d", prefix)
					if unfinished {
						state = "never finished"
					}
					report("group %s, key %d: seq %d (message %d) started at clock %d before seq %d (message %d) was finished (%s)",
						appGroupNames[g], k, m.seq, m.id, e.clock, b.seq, b.id, state)
					break
				}
			}
			if !unfinished {
				if m.finish < 0 {
					unfinished, blocker = true, i
				} else if m.finish > prefix {
					prefix, blocker = m.finish, i
				}
			}
		}
		// 2. Successes follow the key's order.
		type ok struct {
			clock int
			m     *appMsg
		}
		var oks []ok
		for _, m := range ms {
			for _, e := range evs[m.id] {
				if e.kind == evOK {
					oks = append(oks, ok{e.clock, m})
				}
			}
		}
		sort.Slice(oks, func(i, j int) bool { return oks[i].clock < oks[j].clock })
		var top *appMsg
		for _, o := range oks {
			if top != nil && o.m.seq < top.seq {
				n++
				report("group %s, key %d: seq %d (message %d) succeeded at clock %d after seq %d (message %d) had succeeded",
					appGroupNames[g], k, o.m.seq, o.m.id, o.clock, top.seq, top.id)
				continue
			}
			if top == nil || o.m.seq > top.seq {
				top = o.m
			}
		}
	}
	return n
}

// sortedKeys returns the keys of m in increasing order.
func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
