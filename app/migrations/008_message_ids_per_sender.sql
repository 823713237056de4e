-- Client-chosen message ids are scoped to their sender (ADR 019):
-- another tenant's ids can neither be probed (a 409 told they exist) nor squatted
-- (taken first so the owner's own send fails). Idempotency stays exact: the same
-- sender, the same id and the same content is the stored record; other content 409.
ALTER TABLE task_messages DROP CONSTRAINT task_messages_pkey;
ALTER TABLE task_messages ADD PRIMARY KEY (sender, message_id);
