-- Migration 26: a push notifies only a worker that waits (issue 27). A worker about to wait
-- requests a wake-up for its queues (request_wakeup, wakeups), and the first transaction that
-- makes a job of the queue ready takes the request and notifies (notify); the others notify
-- nobody, so their commits no longer queue for NOTIFY's database-wide lock. send_notification
-- returns whether it notified, and notify takes whether the queue's flow limits hold jobs back,
-- so their old signatures go before the current functions are defined. VACUUM no longer cuts
-- empty pages off the jobs table's end, which took a lock that stopped every push and claim.
DROP FUNCTION IF EXISTS postkit_queue.send_notification(text, text);
DROP FUNCTION IF EXISTS postkit_queue.notify(text, text);
CREATE TABLE postkit_queue.wakeups (
    namespace    text        NOT NULL,
    queue        text        NOT NULL,
    requested_at timestamptz,
    PRIMARY KEY (namespace, queue)
) WITH (fillfactor = 50);
ALTER TABLE postkit_queue.jobs SET (vacuum_truncate = false);
-- schema: 417e67d092a7d4c7
