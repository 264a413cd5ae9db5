package sluice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice"
)

// BenchmarkSendBatch measures SendBatch throughput by batch size, one
// producer, each batch its own transaction. Run it with
//
//	go test -run '^$' -bench SendBatch -benchtime 20000x .
//
// (b.N counts messages.)
func BenchmarkSendBatch(b *testing.B) {
	ctx := context.Background()
	pool := server.NewPool(b)
	client := sluice.NewClient(pool)
	for _, size := range []int{1, 100, 1000} {
		queue := fmt.Sprintf("bench%d", size)
		if err := client.CreateQueue(ctx, queue, &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false)}); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			body := json.RawMessage(`{"order_id": 12345, "customer": "c-17", "amount": 42.5}`)
			msgs := make([]sluice.BatchMessage, size)
			for i := range msgs {
				msgs[i] = sluice.BatchMessage{Body: body, Key: "c-17"}
			}
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += size {
				if _, err := client.SendBatch(ctx, queue, msgs[:min(size, b.N-sent)], nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSend is the single-message Send (one transaction per message),
// for comparison with batch=1.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	client := sluice.NewClient(server.NewPool(b))
	if err := client.CreateQueue(ctx, "bench", &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false)}); err != nil {
		b.Fatal(err)
	}
	body := json.RawMessage(`{"order_id": 12345, "customer": "c-17", "amount": 42.5}`)
	b.ResetTimer()
	for range b.N {
		if _, err := client.Send(ctx, "bench", body, &sluice.SendOptions{Key: "c-17"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
