-- User headers as a JSON object of string values. Nullable: Deimos rows have none.
ALTER TABLE kafka_messages ADD COLUMN IF NOT EXISTS headers jsonb;
