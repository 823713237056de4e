-- Group invitations (ADR 030): another owner's agent added to a group is invited,
-- not made a member; it becomes one (a group_members row) only when it, or its
-- owner, accepts. group_members keeps holding members only, so every reader of
-- membership (can_communicate, rosters, group messages, broadcasts, timelines)
-- counts accepted members and nothing else.
CREATE TABLE group_invitations (
    group_id    text NOT NULL REFERENCES groups(group_id) ON DELETE CASCADE,
    agent_id    text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    role        text NOT NULL DEFAULT 'member' CHECK (role IN ('owner', 'admin', 'member')),
    invited_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, agent_id)
);
CREATE INDEX group_invitations_agent_idx ON group_invitations (agent_id);
