-- Discarding dead letters (issue 38, item 4): sluice.redrive becomes the log
-- of what became of each dead letter, once: redriven (message_id is the
-- message sent for it) or discarded (message_id NULL; redriven_at is then
-- when it was discarded). dead_letters, status's dead and redrive already
-- skip a dead letter that has a row here, so a discarded one is gone from
-- all three, and a redrive and a discard of the same dead letter conflict on
-- its primary key (one of them wins). The dead letter's own row stays, as a
-- redriven one's does: status's dead_lettered keeps counting it (a counter
-- that only grows), and it goes with drop_group / drop_queue.
ALTER TABLE sluice.redrive ALTER COLUMN message_id DROP NOT NULL;
