-- The R1/R2 floor: one hand-written statement that builds the record's JSON inside PostgreSQL
-- (latest snapshots at the instant, counts, the first 100 inbound and outbound observations with
-- their resolutions, works and standing receipts, the measurements). Digests and the exact key
-- order are left out: this is the cost of fetching and shaping the same data, nothing more.
-- Visibility is the API's rule: an observation counts from its visible_from (parsed, and its citing
-- paper has a snapshot), on the same columns and indexes.
-- :hub and :as_of are substituted by the harness.
WITH p AS (
    SELECT * FROM paper_snapshots
    WHERE arxiv_id = ':hub' AND observed_at <= ':as_of'
    ORDER BY observed_at DESC LIMIT 1
),
obs AS (
    (SELECT 'in' AS direction, o.* FROM citation_observations o
     WHERE o.cited_arxiv_id = ':hub' AND o.visible_from <= ':as_of'
     ORDER BY o.citing_arxiv_id, o.reference_index, o.observation_id LIMIT 100)
    UNION ALL
    (SELECT 'out', o.* FROM citation_observations o
     WHERE o.citing_arxiv_id = ':hub' AND o.visible_from <= ':as_of'
     ORDER BY o.reference_index, o.observation_id LIMIT 100)
),
items AS (
    SELECT o.direction, o.citing_arxiv_id, o.reference_index, o.observation_id,
           json_build_object(
               'observation_id', o.observation_id,
               'citation', json_build_object(
                   'reference_index', o.reference_index, 'source', o.source,
                   'source_observed_at', o.source_observed_at,
                   'citing_paper', (SELECT json_build_object('arxiv_id', s.arxiv_id, 'title', s.title,
                                           'version', s.latest_version, 'submitted_at', s.submitted_at,
                                           'last_updated', s.last_updated, 'snapshot_observed_at', s.observed_at)
                                    FROM paper_snapshots s WHERE s.arxiv_id = o.citing_arxiv_id
                                      AND s.observed_at <= ':as_of' ORDER BY s.observed_at DESC LIMIT 1),
                   'cited_paper', (SELECT json_build_object('arxiv_id', s.arxiv_id, 'title', s.title,
                                          'version', s.latest_version, 'submitted_at', s.submitted_at,
                                          'last_updated', s.last_updated, 'snapshot_observed_at', s.observed_at)
                                   FROM paper_snapshots s WHERE s.arxiv_id = o.cited_arxiv_id
                                     AND s.observed_at <= ':as_of' ORDER BY s.observed_at DESC LIMIT 1),
                   'cited_work', (SELECT row_to_json(w) FROM (
                                      SELECT * FROM work_snapshots ws WHERE ws.work_id = o.work_id
                                        AND ws.observed_at <= ':as_of' ORDER BY ws.observed_at DESC LIMIT 1) w)),
               'resolution', (SELECT json_build_object('status', r.status, 'resolver_source', r.resolver_source,
                                                       'observed_at', r.observed_at)
                              FROM resolutions r WHERE r.observation_id = o.observation_id
                                AND r.observed_at <= ':as_of' ORDER BY r.observed_at DESC LIMIT 1),
               'standing_notice', json_build_object(
                   'source_receipts', (SELECT coalesce(json_agg(json_build_object('source', x.source,
                                                                                 'observed_at', x.observed_at)
                                                                ORDER BY x.source), '[]')
                                       FROM (SELECT DISTINCT ON (source) source, observed_at FROM standing_receipts sr
                                             WHERE sr.work_id = o.work_id AND sr.observed_at <= ':as_of'
                                             ORDER BY source, observed_at DESC) x),
                   'events', (SELECT coalesce(json_agg(row_to_json(e) ORDER BY e.observed_at, e.source), '[]')
                              FROM work_events e WHERE e.work_id = o.work_id AND e.observed_at <= ':as_of'))
           ) AS item
    FROM obs o
)
SELECT json_build_object(
    'paper', (SELECT row_to_json(p) FROM p),
    'total_inbound', (SELECT count(*) FROM citation_observations o
                      WHERE o.cited_arxiv_id = ':hub' AND o.visible_from <= ':as_of'),
    'total_outbound', (SELECT count(*) FROM citation_observations o
                       WHERE o.citing_arxiv_id = ':hub' AND o.visible_from <= ':as_of'),
    'inbound', (SELECT json_agg(item ORDER BY citing_arxiv_id, reference_index, observation_id)
                FROM items WHERE direction = 'in'),
    'outbound', (SELECT json_agg(item ORDER BY reference_index, observation_id) FROM items WHERE direction = 'out'),
    'external_citation_measurements', (
        SELECT coalesce(json_agg(json_build_object('source', m.source, 'count', m.count, 'observed_at', m.observed_at)
                                 ORDER BY m.source), '[]')
        FROM (SELECT DISTINCT ON (source) * FROM external_measurements
              WHERE arxiv_id = ':hub' AND observed_at <= ':as_of' ORDER BY source, observed_at DESC) m)
)::text;
