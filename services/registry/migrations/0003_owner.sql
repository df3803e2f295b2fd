-- The identity that first registered each name owns it (issue #12): only it, or an admin, may
-- re-register or remove the name. NULL for names registered while authentication was off.
ALTER TABLE agents ADD COLUMN owner TEXT;
