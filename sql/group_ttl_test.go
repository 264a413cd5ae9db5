package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"
)

func (b *bundle) groupExists(queue, group string) bool {
	b.t.Helper()
	return b.int64(`SELECT count(*) FROM sluice.list_queues() q WHERE q.queue = $1 AND $2 = ANY (q.groups)`, queue, group) == 1
}

// TestGroupTTL: a group created with a ttl is dropped by maintenance once no
// receive has used it for that long, and not before; receives keep it
// alive; a group without a ttl never expires; a receive's own upkeep on
// another group of the queue expires it too, so no scheduler is needed
// (issue 15, item 9). On both engines (engine 2's receives ran the
// queue's upkeep only when the epoch was due to rotate).
func TestGroupTTL(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			groupTTL(t, engine)
		})
	}
}

func groupTTL(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d}`, engine))
	for _, bad := range []string{"0 seconds", "-1 second", "500 milliseconds", "400 days"} {
		if _, err := b.pool.Exec(b.ctx, `SELECT sluice.create_group('q', 'bad', 'latest', $1::interval)`, bad); sqlstate(err) != "SL006" {
			t.Errorf("create_group with ttl %s: %v, want SL006", bad, err)
		}
	}
	b.exec(`SELECT sluice.create_group('q', 'idle', 'latest', '2 seconds')`)
	b.exec(`SELECT sluice.create_group('q', 'busy', 'latest', ttl => '2 seconds')`)
	b.exec(`SELECT sluice.create_group('q', 'forever', 'latest')`)
	b.send(b.pool, "q", `1`)
	start := time.Now()
	for time.Since(start) < 3*time.Second {
		b.receive("q", "busy", 10, "")
		b.exec(`SELECT * FROM sluice.maintain()`)
		if time.Since(start) < 1500*time.Millisecond && !b.groupExists("q", "idle") {
			t.Fatalf("the idle group expired after %v, before its ttl of 2 s", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b.groupExists("q", "idle") {
		t.Errorf("the idle group with a ttl of 2 s still exists after 3 s and maintain()")
	}
	if !b.groupExists("q", "busy") {
		t.Errorf("the group received from every 100 ms expired")
	}
	if !b.groupExists("q", "forever") {
		t.Errorf("a group without ttl expired")
	}
	if _, err := receiveOn(b.ctx, b.pool, "q", "idle", 1, ""); sqlstate(err) != "SL003" {
		t.Errorf("receive from the expired group: %v, want SL003", err)
	}

	// No maintain(): the upkeep of receives on another group expires it.
	time.Sleep(2500 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for b.groupExists("q", "busy") && time.Now().Before(deadline) {
		b.receive("q", "forever", 10, "")
		time.Sleep(200 * time.Millisecond)
	}
	if b.groupExists("q", "busy") {
		t.Errorf("the busy group, unused for 2.5 s, was not expired by the receives of another group")
	}
}
