package doctor

// The statements doctor runs itself, all reads. Identifiers are never spliced in: the schema and
// the table names are bound values.
const (
	// sqlClock reads the database's clock.
	sqlClock = "SELECT clock_timestamp()"
	// sqlSyncCommit reads synchronous_commit.
	sqlSyncCommit = "SELECT current_setting('synchronous_commit')"
	// sqlSchema reads the role's privileges on the schema.
	sqlSchema = "SELECT has_schema_privilege(current_user, $1::text, 'USAGE'), has_schema_privilege(current_user, $1::text, 'CREATE')"
	// sqlTables reads, for each named table of the schema that exists, the role's privileges on
	// it and whether the role owns it (directly or through a role it belongs to).
	sqlTables = `SELECT c.relname,
		has_table_privilege(current_user, c.oid, 'SELECT'), has_table_privilege(current_user, c.oid, 'INSERT'),
		has_table_privilege(current_user, c.oid, 'UPDATE'), has_table_privilege(current_user, c.oid, 'DELETE'),
		pg_has_role(current_user, c.relowner, 'USAGE')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1::text AND c.relname = ANY($2::text[]) AND c.relkind IN ('r', 'p')`
)
