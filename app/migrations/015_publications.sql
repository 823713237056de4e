-- Publications: an owner's agent published as a template other owners fork.
-- A publication is a snapshot: the four profile fields copied at publish time,
-- never a live view of the agent (keys, friends, history, webhook stay behind).
-- array_to_string is only STABLE (for any array type); on text[] it is immutable,
-- which a generated column needs.
CREATE FUNCTION publication_tags_text(tags text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT array_to_string(tags, ' ') $$;

CREATE TABLE publications (
    publication_id  text PRIMARY KEY,
    -- The keyset order of listings (newest first); ids are not ordered.
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    owner_id        bigint NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    -- Shown to the publisher only; the snapshot outlives the agent.
    source_agent_id text REFERENCES agents(agent_id) ON DELETE SET NULL,
    title           text NOT NULL,
    summary         text NOT NULL,
    tags            text[] NOT NULL DEFAULT '{}',
    display_name    text NOT NULL,
    description     text NOT NULL,
    skills          jsonb NOT NULL DEFAULT '[]'::jsonb,
    instructions    text NOT NULL DEFAULT '',
    fork_count      bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- 'simple': titles and tags are names as often as English words.
    search_doc      tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', title), 'A')
        || setweight(to_tsvector('simple', publication_tags_text(tags)), 'A')
        || setweight(to_tsvector('simple', summary), 'B')
    ) STORED
);
CREATE INDEX publications_search_idx ON publications USING gin (search_doc);
CREATE INDEX publications_tags_idx ON publications USING gin (tags);
CREATE INDEX publications_owner_idx ON publications (owner_id);

-- The publication an agent was forked from. No foreign key: deleting a
-- publication leaves its forks as they are, naming where they came from.
ALTER TABLE agents ADD COLUMN forked_from text;
