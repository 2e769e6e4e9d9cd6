-- Migration 5: the namespace assignments of tenant isolation, by role name (migration 9 keys
-- them by role OID).
CREATE TABLE postkit_queue.tenants (
    namespace text NOT NULL,
    role      name NOT NULL,
    PRIMARY KEY (namespace, role)
);
