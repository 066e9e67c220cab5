package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for a person: one line per finding, errors first, each with the
// setting, the value seen, the value wanted and the fix, then a summary line.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Findings) > 0 {
		fmt.Fprintln(tw, "SEVERITY\tCHECK\tSETTING\tSEEN\tWANT")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Check, cell(f.Setting), cell(f.Seen), cell(f.Want))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Findings) > 0 {
		fmt.Fprintln(w, "\nFixes:")
	}
	for i, f := range r.Findings {
		fmt.Fprintf(w, "%2d. %s: %s\n", i+1, f.Check, f.Fix)
	}
	_, err := fmt.Fprintf(w, "\n%d errors, %d warnings (checked: %s)\n", r.Errors(), r.Warnings(), strings.Join(r.Checked, ", "))
	return err
}

// WriteJSON writes the report as one JSON object: {"findings": [...], "checked": [...],
// "errors": n, "warnings": n}.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Report
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
	}{r, r.Errors(), r.Warnings()})
}

// cell keeps a table cell on one line, and short.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
