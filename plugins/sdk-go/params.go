package plugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Params is a plugin's view of the class parameters
// (request.StorageClass.Parameters in Provision, request.Parameters in
// Delete). Every error it returns names the parameter and the fix, as a
// KindParam Answer.
type Params struct {
	plugin string
	pairs  Pairs
}

// NewParams: plugin names the plugin in messages.
func NewParams(plugin string, pairs Pairs) Params {
	return Params{plugin: plugin, pairs: pairs}
}

func paramError(format string, args ...any) error { return answer(KindParam, format, args) }

// QuoteList is `"a", "b", "c"`.
func QuoteList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = strconv.Quote(item)
	}
	return strings.Join(quoted, ", ")
}

// Get is the raw value of key.
func (p Params) Get(key string) (string, bool) { return Lookup(p.pairs, key) }

// RejectUnknown fails naming every parameter not in known: an operator's
// typo is reported instead of ignored.
func (p Params) RejectUnknown(known ...string) error {
	var unknown []string
	for _, pair := range p.pairs {
		if !slices.Contains(known, pair.F0) {
			unknown = append(unknown, pair.F0)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	plural, accepted := "s", "none"
	if len(unknown) == 1 {
		plural = ""
	}
	if len(known) > 0 {
		accepted = QuoteList(known)
	}
	return paramError("unknown class parameter%s %s: the %s plugin accepts only %s (parameter names are case-sensitive)",
		plural, QuoteList(unknown), p.plugin, accepted)
}

// Required is the value of a required parameter (empty counts as missing);
// what says what to set it to, e.g. "the NFS server's address, e.g. 10.0.0.5".
func (p Params) Required(key, what string) (string, error) {
	value, _ := p.Get(key)
	if value == "" {
		return "", paramError("missing class parameter %q: the %s plugin needs it; set it to %s", key, p.plugin, what)
	}
	return value, nil
}

// Optional is the value of an optional parameter, or fallback.
func (p Params) Optional(key, fallback string) string {
	if value, ok := p.Get(key); ok {
		return value
	}
	return fallback
}

// Bool is exactly "true" or "false", fallback when unset.
func (p Params) Bool(key string, fallback bool) (bool, error) {
	switch value, ok := p.Get(key); {
	case !ok:
		return fallback, nil
	case value == "true" || value == "false":
		return value == "true", nil
	default:
		return false, p.Invalid(key, value, `it must be "true" or "false"`)
	}
}

// OneOf is one of allowed (case-sensitive), fallback when unset ("":
// required).
func (p Params) OneOf(key string, allowed []string, fallback string) (string, error) {
	value, ok := p.Get(key)
	if !ok {
		if fallback != "" {
			return fallback, nil
		}
		return p.Required(key, "one of "+QuoteList(allowed))
	}
	if !slices.Contains(allowed, value) {
		return "", p.Invalid(key, value, "it must be one of "+QuoteList(allowed))
	}
	return value, nil
}

// Uint is a non-negative integer, fallback when unset.
func (p Params) Uint(key string, fallback uint64) (uint64, error) {
	value, ok := p.Get(key)
	if !ok {
		return fallback, nil
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return 0, p.Invalid(key, value, "it must be a non-negative integer")
	}
	return n, nil
}

// AbsPath is an absolute, normalized path (see NormalizeAbs), fallback when
// unset ("": required, what describes it).
func (p Params) AbsPath(key, fallback, what string) (string, error) {
	value, ok := p.Get(key)
	if !ok {
		if fallback == "" {
			return p.Required(key, what)
		}
		value = fallback
	}
	normalized, err := NormalizeAbs(value)
	if err != nil {
		return "", p.Invalid(key, value, "it must be an absolute, normalized path: "+err.Error())
	}
	return normalized, nil
}

// Invalid is the error for a parameter set to something unusable, for
// checks of the plugin's own.
func (p Params) Invalid(key, value, why string) error {
	return paramError("class parameter %q is %s: %s", key, fmt.Sprintf("%q", value), why)
}
