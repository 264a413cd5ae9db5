-- ack gains durable (false: the acknowledging transaction commits without
-- waiting for the disk): drop the old signature so that the new one does
-- not become an ambiguous overload.
DROP FUNCTION IF EXISTS sluice.ack(text, text, text[]);
