-- OAuth 2.1 for remote MCP clients (ADR 040). A client is registered (RFC 7591) or
-- known by the URL of its metadata document (CIMD), fetched when it first asks; a
-- grant is one client acting as one agent, created when its owner consents, and
-- lives until revoked, its agent deleted (cascade) or a key of the agent revoked.
CREATE TABLE oauth_clients (
    client_id     text PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('registered', 'metadata-document')),
    client_name   text NOT NULL DEFAULT '',
    client_uri    text,
    redirect_uris text[] NOT NULL,
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- When a metadata document was last fetched (it is fetched again once stale).
    fetched_at    timestamptz
);

CREATE TABLE oauth_grants (
    grant_id               text PRIMARY KEY,
    client_id              text NOT NULL REFERENCES oauth_clients(client_id) ON DELETE CASCADE,
    agent_id               text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    owner_id               bigint NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    resource               text NOT NULL,
    scope                  text NOT NULL DEFAULT '',
    -- SHA-256 of the live refresh token, and of the one it replaced: a replayed old
    -- refresh token means it leaked, and ends the grant.
    refresh_hash           text NOT NULL UNIQUE,
    previous_refresh_hash  text,
    refresh_expires_at     timestamptz NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    last_used_at           timestamptz,
    revoked_at             timestamptz
);
CREATE INDEX oauth_grants_owner_idx ON oauth_grants (owner_id, created_at DESC);
CREATE INDEX oauth_grants_agent_idx ON oauth_grants (agent_id) WHERE revoked_at IS NULL;
CREATE INDEX oauth_grants_previous_idx ON oauth_grants (previous_refresh_hash)
    WHERE previous_refresh_hash IS NOT NULL;

-- Authorization codes: single use, minutes long. Only the SHA-256 is kept.
CREATE TABLE oauth_codes (
    code_hash      text PRIMARY KEY,
    client_id      text NOT NULL REFERENCES oauth_clients(client_id) ON DELETE CASCADE,
    agent_id       text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    owner_id       bigint NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    redirect_uri   text NOT NULL,
    code_challenge text NOT NULL,
    resource       text NOT NULL,
    scope          text NOT NULL DEFAULT '',
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz,
    -- The grant the code was exchanged for: a second exchange ends it.
    grant_id       text REFERENCES oauth_grants(grant_id) ON DELETE SET NULL
);
