-- Every document belongs to a tenant; its nodes carry the root's, so any node read says whose
-- conversation it is in. Documents written before tenants existed belong to the default tenant ''.
ALTER TABLE docmem_nodes ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
-- A tenant's roots, newest first (`GET /conversations` of a user).
CREATE INDEX IF NOT EXISTS docmem_nodes_roots_by_tenant ON docmem_nodes (tenant, parent_id, updated_at);
