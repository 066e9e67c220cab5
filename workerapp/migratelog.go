package workerapp

import "log/slog"

// logMigrated logs what one set of migrations (what: "inbox", or the Spec's name) applied: the
// versions, or, when the schema was up to date, that there was nothing to apply.
func logMigrated(log *slog.Logger, what string, versions []int, attrs ...any) {
	if len(versions) == 0 {
		log.Info(what+" migrations: nothing to apply; the schema is up to date", attrs...)
		return
	}
	log.Info(what+" migrations applied", append(attrs, "versions", versions)...)
}
