-- Migration 47: a fair queue's claim locks what claim_fair chose the way claim_limited locks a
-- group claim's, in one statement of claim_limited's: claim_fair returns its choice unlocked
-- (chosen), so its result list changes, and the old signature goes before the current
-- functions are defined. No table changes.
DROP FUNCTION IF EXISTS postkit_queue.claim_fair(
    text, text, integer, timestamptz, text, integer, integer, boolean);
-- schema: 8f857fd15901f833
