package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice"
)

// A worker whose fetch loop waits for its poll with a slot free receives a
// key's next message as soon as the earlier one is done: after its ack
// (durable, or carried by the next receive with AsyncCommitAcks), or after
// the nack that made it a dead letter. (The loop was woken only once a
// durable ack sent beside a receive committed; otherwise the next message
// waited for the poll, 5 s here.)
func TestConsumeTakesAKeysNextMessageOnceTheEarlierIsDone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		async, fail bool
	}{{"durable ack", false, false}, {"ack with the next receive", true, false}, {"dead letter", false, true}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			one := 1
			b.createQueue("q", &sluice.QueueOptions{MaxAttempts: &one})
			first, err := b.client.Send(b.ctx, "q", []byte(`1`), &sluice.SendOptions{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			ended, next := make(chan time.Time, 1), make(chan time.Time, 1)
			stop := b.consume("q", "default", func(ctx context.Context, m *sluice.Message) error {
				if m.ID != first {
					next <- time.Now()
					return nil
				}
				if _, err := b.client.Send(ctx, "q", []byte(`2`), &sluice.SendOptions{Key: "k"}); err != nil {
					return err
				}
				// past the loop's frequent polls after the wake-up of that send
				time.Sleep(1500 * time.Millisecond)
				ended <- time.Now()
				if c.fail {
					return errors.New("the first message fails")
				}
				return nil
			}, &sluice.ConsumeOptions{Concurrency: 2, AsyncCommitAcks: c.async, PollInterval: 5 * time.Second})
			defer stop() //nolint:errcheck // (stopped below)
			var end time.Time
			select {
			case end = <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the first message was not handled")
			}
			select {
			case at := <-next:
				t.Logf("the key's next message came %v after the first's handler ended", at.Sub(end).Round(time.Millisecond))
			case <-time.After(3 * time.Second):
				t.Fatal("the key's next message was not handled within 3 s of the first's end: the loop waited for its poll")
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
