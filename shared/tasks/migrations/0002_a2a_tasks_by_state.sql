-- Retention deletes an agent's finished tasks by state and age, and startup finds the tasks a
-- crash left running by state: both read this index instead of the whole table.
CREATE INDEX IF NOT EXISTS a2a_tasks_by_state ON a2a_tasks (agent, state, updated_at);
