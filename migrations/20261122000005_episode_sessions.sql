-- Episodes of one session in order: retrieval looks up an episode's neighbours in its
-- session (the turns before and after it) to rank conversational memory in context.
CREATE INDEX episodes_session_order ON episodes (tenant_id, butler, session_id, created_at, id)
    WHERE session_id IS NOT NULL;
