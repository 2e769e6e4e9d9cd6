-- Migration 29: flow_state remembers whether the last claim found the queue's rate window
-- full (rate_held), so that next_run_at keeps the queue's ready jobs due once the window has
-- emptied, until a claim finds it open: a worker that looked a moment before the slot and
-- again after it claims, instead of sleeping until its fallback poll.
ALTER TABLE postkit_queue.flow_state ADD COLUMN IF NOT EXISTS rate_held boolean NOT NULL DEFAULT false;
-- schema: 8b398b40e63206e8
