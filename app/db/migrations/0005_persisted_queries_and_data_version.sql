-- Automatic persisted queries: documents registered by clients (Apollo's protocol), shared by every
-- worker and kept across restarts. Content-addressed: the key is the SHA-256 of the document. The API's
-- read-only role may add documents (and read them), nothing else; the API caps the table's size.
CREATE TABLE persisted_queries (
    sha256     text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    document   text NOT NULL CHECK (length(document) <= 100000),
    created_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT ON persisted_queries TO pith_reader;

-- A number that changes whenever an import commits: with the request, it makes the validator of a
-- GraphQL GET answer. It is a row, so a reader sees the version that goes with the data it reads.
CREATE TABLE data_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO data_version VALUES (true, 1);
