package sluice_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

// TestPeekAndLeases covers what the conformance vector (peek_leases.json)
// leaves out: a delayed message's DeliverAt, the default page sizes, the
// Tx variants, the times of a lease, and the errors' sentinels and text.
func TestPeekAndLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("looked", &sluice.QueueOptions{Lanes: sluice.Ptr(1)})
	first := b.send("looked", `{"n": 0}`)
	delayed, err := b.client.Send(b.ctx, "looked", json.RawMessage(`{"n": 1}`), &sluice.SendOptions{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 12; i++ {
		b.send("looked", `{"n": `+itoa(i)+`}`)
	}

	// nil options: the first 10, by id.
	page, err := b.client.Peek(b.ctx, "looked", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 10 || page[0].ID != first || page[1].ID != delayed {
		t.Fatalf("peek: %+v", page)
	}
	if m := page[0]; string(m.Body) != `{"n": 0}` || m.Headers != nil || m.Key != "" || !m.DeliverAt.IsZero() ||
		m.ResentTo != nil || time.Since(m.SentAt) > time.Minute {
		t.Errorf("first message %+v", m)
	}
	if d := time.Until(page[1].DeliverAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("delayed message deliverable in %s, want about an hour", d)
	}
	rest, err := b.client.Peek(b.ctx, "looked", &sluice.PeekOptions{Max: 1000, AfterID: page[9].ID})
	if err != nil || len(rest) != 2 {
		t.Fatalf("next page: %+v, %v", rest, err)
	}

	msgs, err := b.client.Receive(b.ctx, "looked", "default", &sluice.ReceiveOptions{Max: 3, Lease: time.Minute, Consumer: "c1"})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("receive: %v, %v", msgs, err)
	}
	var ls []sluice.Lease
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := b.client.PeekTx(b.ctx, tx, "looked", &sluice.PeekOptions{Max: 1}); err != nil {
			return err
		}
		ls, err = b.client.LeasesTx(b.ctx, tx, "looked", &sluice.LeasesOptions{Group: "default"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 {
		t.Fatalf("leases: %+v", ls)
	}
	for i, l := range ls {
		m := msgs[i]
		if l.Group != "default" || l.ID != m.ID || l.Pos != m.Pos || l.Attempt != 1 || l.Consumer != "c1" ||
			!l.LeaseExpiresAt.Equal(m.LeaseExpiresAt) || time.Since(l.DeliveredAt) > time.Minute {
			t.Errorf("lease %d: %+v, message %+v", i, l, m)
		}
	}
	if ls, err := b.client.Leases(b.ctx, "looked", &sluice.LeasesOptions{Max: 2}); err != nil || len(ls) != 2 {
		t.Errorf("leases, 2 at most: %+v, %v", ls, err)
	}

	for _, tc := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"peek of an unknown queue", peekErr(b, "nope", nil), sluice.ErrQueueNotFound, `peeking at queue "nope": `},
		{"peek of a bad name", peekErr(b, "bad name!", nil), sluice.ErrInvalidName, `peeking at queue "bad name!": `},
		{"peek of too many", peekErr(b, "looked", &sluice.PeekOptions{Max: 1001}), sluice.ErrInvalidArgument, `peeking at queue "looked": `},
		{"leases of an unknown queue", leasesErr(b, "nope", nil), sluice.ErrQueueNotFound, `listing leases of queue "nope": `},
		{"leases of an unknown group", leasesErr(b, "looked", &sluice.LeasesOptions{Group: "nobody"}), sluice.ErrGroupNotFound, `listing leases of queue "looked": `},
		{"leases of too few", leasesErr(b, "looked", &sluice.LeasesOptions{Max: -1}), sluice.ErrInvalidArgument, `listing leases of queue "looked": `},
	} {
		var serr *sluice.Error
		if !errors.Is(tc.err, tc.want) || !errors.As(tc.err, &serr) || !strings.HasPrefix(tc.err.Error(), tc.text) {
			t.Errorf("%s: %v, want %v starting with %q", tc.name, tc.err, tc.want, tc.text)
		}
	}

	// Neither leases nor changes anything.
	if s := b.status("looked", "default"); s.InFlight != 3 || s.Ready != 8 || s.Delayed != 1 {
		t.Errorf("status after peek and leases: %+v", s)
	}
}

func peekErr(b *bundle, queue string, opts *sluice.PeekOptions) error {
	_, err := b.client.Peek(b.ctx, queue, opts)
	return err
}

func leasesErr(b *bundle, queue string, opts *sluice.LeasesOptions) error {
	_, err := b.client.Leases(b.ctx, queue, opts)
	return err
}
