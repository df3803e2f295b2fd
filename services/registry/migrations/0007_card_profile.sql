-- Search over agent cards (issue #37). `profile` is what the registry searches an agent by: its
-- card's description and skills (id, name, description, tags, examples) as a JSON object, '{}'
-- when its card was not read. `tenant` is the tenant of the identity that registered it: '' for
-- an agent every tenant sees (registered by an admin, by a tenant-less agent or with
-- authentication off); otherwise only that tenant's callers find it.
ALTER TABLE agents ADD COLUMN profile TEXT NOT NULL DEFAULT '{}';
ALTER TABLE agents ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
