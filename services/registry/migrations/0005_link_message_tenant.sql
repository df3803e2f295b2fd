-- Link messages belong to the tenant of the call that sent them (issue #34): a user reads only its
-- own tenant's history. Messages kept from before have no known tenant and go to the default one
-- (''), which only its users and admins read. Retention counts per link and tenant, so one tenant's
-- traffic never pushes another's history out.
ALTER TABLE link_messages ADD COLUMN tenant TEXT NOT NULL DEFAULT '';

CREATE INDEX IF NOT EXISTS idx_link_messages_link_tenant ON link_messages (link_id, tenant, seq);
