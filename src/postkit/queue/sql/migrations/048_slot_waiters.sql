-- Migration 48: a slot freed in a queue that a concurrency or group limit holds back wakes one
-- waiting worker, not all of them. The workers waiting for its slots (slot_waiters, filled by
-- wait_for_slot and emptied by stop_waiting) are woken each on its listener's own channel by
-- notify, which takes how many to wake (p_wake), so its old signature goes before the current
-- functions are defined.
CREATE TABLE postkit_queue.slot_waiters (
    namespace text        NOT NULL,
    queue     text        NOT NULL,
    pid       integer     NOT NULL,
    since     timestamptz NOT NULL,
    PRIMARY KEY (namespace, queue, pid)
);
DROP FUNCTION IF EXISTS postkit_queue.notify(text, text, boolean);
-- schema: edc83bdc7aff2468
