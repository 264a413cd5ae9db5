package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

// exampleClient connects to DATABASE_URL, which must have the sluice schema
// (sluice migrate), and drops the queues an example made when it ends.
func exampleClient(ctx context.Context, queues ...string) (*sluice.Client, func()) {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client := sluice.NewClient(pool)
	return client, func() {
		for _, q := range queues {
			if _, err := client.DropQueue(ctx, q); err != nil {
				log.Print(err)
			}
		}
		pool.Close()
	}
}

// Send a message, receive it and acknowledge it.
func Example() {
	ctx := context.Background()
	client, done := exampleClient(ctx, "example.orders")
	defer done()

	if err := client.CreateQueue(ctx, "example.orders", nil); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Send(ctx, "example.orders", json.RawMessage(`{"order": 42}`), nil); err != nil {
		log.Fatal(err)
	}
	msgs, err := client.Receive(ctx, "example.orders", "default", &sluice.ReceiveOptions{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("attempt %d: %s\n", m.Attempt, m.Body)
		if _, err := client.Ack(ctx, "example.orders", "default", m.Receipt); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// attempt 1: {"order": 42}
}

// Acknowledge a message and send its follow-up in one transaction: both
// happen, or neither.
func ExampleClient_AckTx() {
	ctx := context.Background()
	client, done := exampleClient(ctx, "example.payments", "example.receipts")
	defer done()
	for _, q := range []string{"example.payments", "example.receipts"} {
		if err := client.CreateQueue(ctx, q, nil); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := client.Send(ctx, "example.payments", json.RawMessage(`{"payment": 1, "amount": 30}`), nil); err != nil {
		log.Fatal(err)
	}

	msgs, err := client.Receive(ctx, "example.payments", "default", nil)
	if err != nil {
		log.Fatal(err)
	}
	payment := msgs[0]
	err = client.InTx(ctx, func(tx pgx.Tx) error {
		// ... the application's own writes go here, in tx ...
		if _, err := client.AckTx(ctx, tx, "example.payments", "default", payment.Receipt); err != nil {
			return err
		}
		_, err := client.SendTx(ctx, tx, "example.receipts", json.RawMessage(`{"receipt_for": 1}`), nil)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	st, err := client.Status(ctx, "example.payments")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("payments in flight:", st[0].InFlight)
	receipts, err := client.Receive(ctx, "example.receipts", "default", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("receipt:", string(receipts[0].Body))
	// Output:
	// payments in flight: 0
	// receipt: {"receipt_for": 1}
}

// Run a handler over a queue until the context is cancelled. Consume
// acknowledges a message when the handler returns nil and retries it when
// it returns an error.
func ExampleClient_Consume() {
	ctx := context.Background()
	client, done := exampleClient(ctx, "example.emails")
	defer done()
	if err := client.CreateQueue(ctx, "example.emails", nil); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Send(ctx, "example.emails", json.RawMessage(`{"to": "ada@example.com"}`), nil); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := client.Consume(ctx, "example.emails", "default", func(ctx context.Context, m *sluice.Message) error {
		var email struct{ To string }
		if err := json.Unmarshal(m.Body, &email); err != nil {
			return err // retried, then dead-lettered
		}
		fmt.Println("sending an email to", email.To)
		cancel() // a real consumer runs until it is told to stop
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// sending an email to ada@example.com
}

// Engine errors match their sentinels with errors.Is.
func ExampleErrQueueNotFound() {
	ctx := context.Background()
	client, done := exampleClient(ctx)
	defer done()

	_, err := client.Send(ctx, "example.nowhere", json.RawMessage(`1`), nil)
	fmt.Println(errors.Is(err, sluice.ErrQueueNotFound))
	// Output:
	// true
}
