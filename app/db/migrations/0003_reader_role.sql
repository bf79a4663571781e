-- The API needs only to read: it can run as a role in pith_reader, while imports use the owner.
-- Roles are cluster-wide, so another database's migration may have created it already.
DO $$
BEGIN
    CREATE ROLE pith_reader NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
GRANT USAGE ON SCHEMA public TO pith_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO pith_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO pith_reader;
