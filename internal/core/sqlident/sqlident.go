// Package sqlident validates and quotes the SQL identifiers that sqsinbox takes from
// configuration (schema names). Values never pass through here: they are always bound.
package sqlident

import (
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var pattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports whether name is a plain lower-case identifier of at most 63 bytes: a letter
// or underscore, then letters, digits or underscores. what names the setting in the error.
func Validate(what, name string) error {
	if !pattern.MatchString(name) {
		return fmt.Errorf("%s %q is not a valid identifier: want 1 to 63 characters of [a-z0-9_], not starting with a digit", what, name)
	}
	return nil
}

// Quote returns name as a quoted identifier, or parts joined with dots for a qualified name.
// Call it only on names that passed Validate.
func Quote(parts ...string) string {
	return pgx.Identifier(parts).Sanitize()
}
