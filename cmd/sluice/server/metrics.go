package server

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg                     *prometheus.Registry
	requests                *prometheus.HistogramVec
	sent                    *prometheus.CounterVec
	received, acked, nacked *prometheus.CounterVec
	scrapeTimeout           time.Duration
}

func itoa(i int) string { return strconv.Itoa(i) }

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_http_request_duration_seconds", Help: "Duration of HTTP requests, by route and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "code"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_messages_sent_total", Help: "Messages sent through this server.",
		}, []string{"queue"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_messages_received_total", Help: "Messages received (leased) through this server.",
		}, []string{"queue", "group"}),
		acked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_messages_acked_total", Help: "Messages acked through this server (current receipts only).",
		}, []string{"queue", "group"}),
		nacked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_messages_nacked_total", Help: "Messages nacked through this server (retried or dead-lettered).",
		}, []string{"queue", "group"}),
		scrapeTimeout: 10 * time.Second,
	}
	m.reg.MustRegister(m.requests, m.sent, m.received, m.acked, m.nacked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&queueCollector{s: s}, &poolCollector{s: s})
	return m
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Observe(d.Seconds())
}

var (
	descReady     = prometheus.NewDesc("sluice_queue_ready", "Messages deliverable now, per queue and group (sluice.status).", []string{"queue", "group"}, nil)
	descQWaiting  = prometheus.NewDesc("sluice_queue_waiting", "Keyed messages that would be ready but wait for an earlier message of their key to be completed (not counted in sluice_queue_ready).", []string{"queue", "group"}, nil)
	descDelayed   = prometheus.NewDesc("sluice_queue_delayed", "Messages not deliverable before a later time.", []string{"queue", "group"}, nil)
	descInFlight  = prometheus.NewDesc("sluice_queue_in_flight", "Messages leased and not completed.", []string{"queue", "group"}, nil)
	descDead      = prometheus.NewDesc("sluice_queue_dead", "Dead letters neither redriven nor discarded.", []string{"queue", "group"}, nil)
	descAge       = prometheus.NewDesc("sluice_queue_oldest_pending_age_seconds", "Age of the oldest message the group has not completed.", []string{"queue", "group"}, nil)
	descLag       = prometheus.NewDesc("sluice_queue_lag", "Messages the group has not completed.", []string{"queue", "group"}, nil)
	descHead      = prometheus.NewDesc("sluice_queue_head_position", "Position of the last numbered message (grows with every message numbered: its rate is the queue's throughput).", []string{"queue", "group"}, nil)
	descLWM       = prometheus.NewDesc("sluice_queue_completed_position", "The group's low-water mark: first position not completed (its rate is the group's completion rate).", []string{"queue", "group"}, nil)
	descHeld      = prometheus.NewDesc("sluice_numbering_held_seconds", "How long an open transaction has held the queue's numbering (a receive that numbered new messages and has not committed: they reach no group until it does); 0 when none holds it.", []string{"queue"}, nil)
	descEstimated = prometheus.NewDesc("sluice_queue_status_estimated", "1 when ready and lag include an estimate of the messages not numbered yet beyond the ones sluice.status counts exactly (sluice.status_exact_limit).", []string{"queue", "group"}, nil)
	descDeadTotal = prometheus.NewDesc("sluice_queue_dead_lettered_total", "Messages the group dead-lettered (attempts exhausted by a nack or an expired lease), redriven ones included, whichever client's request did it: sluice.status's dead_lettered. Starts again from 0 when the group is dropped and created again.", []string{"queue", "group"}, nil)
	descUp        = prometheus.NewDesc("sluice_status_up", "1 when the last read of sluice.status succeeded.", nil, nil)
	descListener  = prometheus.NewDesc("sluice_listener_up", "1 while the server's LISTEN connection is up.", nil, nil)
	descWaiting   = prometheus.NewDesc("sluice_long_polls_waiting", "Long polls waiting for messages.", nil, nil)
)

// queueCollector reads sluice.status (as the server's own role) on each
// scrape.
type queueCollector struct{ s *Server }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descQWaiting, descDelayed, descInFlight, descDead, descAge, descLag, descHead, descLWM, descEstimated, descHeld, descDeadTotal, descUp, descListener, descWaiting} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.metrics.scrapeTimeout)
	defer cancel()
	sts, err := c.s.client.Status(ctx, "")
	up := 1.0
	if err != nil {
		up = 0
		c.s.cfg.Logger.Warn("sluice server: reading sluice.status for /metrics", "error", err)
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	listener := 0.0
	if c.s.notify.up.Load() {
		listener = 1
	}
	ch <- prometheus.MustNewConstMetric(descListener, prometheus.GaugeValue, listener)
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(c.s.notify.waiting()))
	heldSeen := map[string]bool{} // (one gauge a queue: every group's row carries it)
	for _, st := range sts {
		if !heldSeen[st.Queue] {
			heldSeen[st.Queue] = true
			ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, st.HeldFor.Seconds(), st.Queue)
		}
		if st.Group == "" {
			continue
		}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, st.Queue, st.Group)
		}
		g(descReady, float64(st.Ready))
		g(descQWaiting, float64(st.Waiting))
		g(descDelayed, float64(st.Delayed))
		g(descInFlight, float64(st.InFlight))
		g(descDead, float64(st.Dead))
		g(descAge, st.OldestPendingAge.Seconds())
		g(descLag, float64(st.Lag))
		g(descHead, float64(st.Head))
		g(descLWM, float64(st.LWM))
		estimated := 0.0
		if st.Estimated {
			estimated = 1
		}
		g(descEstimated, estimated)
		ch <- prometheus.MustNewConstMetric(descDeadTotal, prometheus.CounterValue, float64(st.DeadLettered), st.Queue, st.Group)
	}
}

var (
	descPoolTotal    = prometheus.NewDesc("sluice_db_pool_connections", "Connections of the server's pool.", nil, nil)
	descPoolAcquired = prometheus.NewDesc("sluice_db_pool_acquired_connections", "Connections in use.", nil, nil)
	descPoolIdle     = prometheus.NewDesc("sluice_db_pool_idle_connections", "Idle connections.", nil, nil)
	descPoolMax      = prometheus.NewDesc("sluice_db_pool_max_connections", "The pool's maximum size.", nil, nil)
	descPoolAcquires = prometheus.NewDesc("sluice_db_pool_acquires_total", "Connections acquired from the pool.", nil, nil)
	descPoolEmpty    = prometheus.NewDesc("sluice_db_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, nil)
	descPoolWait     = prometheus.NewDesc("sluice_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.", nil, nil)
)

// poolCollector reports the pgx pool's statistics.
type poolCollector struct{ s *Server }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolTotal, descPoolAcquired, descPoolIdle, descPoolMax, descPoolAcquires, descPoolEmpty, descPoolWait} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.pool.Stat()
	ch <- prometheus.MustNewConstMetric(descPoolTotal, prometheus.GaugeValue, float64(st.TotalConns()))
	ch <- prometheus.MustNewConstMetric(descPoolAcquired, prometheus.GaugeValue, float64(st.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(descPoolIdle, prometheus.GaugeValue, float64(st.IdleConns()))
	ch <- prometheus.MustNewConstMetric(descPoolMax, prometheus.GaugeValue, float64(st.MaxConns()))
	ch <- prometheus.MustNewConstMetric(descPoolAcquires, prometheus.CounterValue, float64(st.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(descPoolEmpty, prometheus.CounterValue, float64(st.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(descPoolWait, prometheus.CounterValue, st.AcquireDuration().Seconds())
}
