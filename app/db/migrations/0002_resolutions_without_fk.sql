-- Resolutions arrive with their observations (one verified document, or one bulk load), so the
-- per-row foreign-key check bought nothing but cost two thirds of a bulk load's merge time.
ALTER TABLE resolutions DROP CONSTRAINT IF EXISTS resolutions_observation_id_fkey;
