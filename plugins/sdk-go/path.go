package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Paths a plugin builds from request data are a trusted root plus one
// checked component: never empty, "." or "..", without "/" or control
// characters, so joining it cannot leave the root. (The sandbox would stop
// an escape anyway; these checks make the plugin's answer say what was
// wrong.)

const (
	// MaxComponentLen is the longest file name most filesystems accept.
	MaxComponentLen = 255
	// MaxNameLen: Kubernetes object names are at most 253 characters.
	MaxNameLen = 253
)

var (
	pvName      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)
)

func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// NormalizeAbs is value without a trailing slash ("/" stays "/"), if it is
// an absolute path without ".", ".." or empty components and without
// control characters.
func NormalizeAbs(value string) (string, error) {
	if !strings.HasPrefix(value, "/") {
		return "", errors.New("it does not start with /")
	}
	if hasControl(value) {
		return "", errors.New("it contains control characters")
	}
	trimmed := strings.TrimRight(value, "/")
	if trimmed == "" {
		return "/", nil
	}
	for _, component := range strings.Split(trimmed[1:], "/") {
		switch component {
		case "":
			return "", errors.New("it contains an empty component (//)")
		case ".", "..":
			return "", errors.New("it contains a . or .. component")
		}
	}
	return trimmed, nil
}

// CheckComponent fails unless name is one safe path component.
func CheckComponent(name string) error {
	var why string
	switch {
	case name == "":
		why = "it is empty"
	case name == "." || name == "..":
		why = "it is . or .."
	case strings.Contains(name, "/"):
		why = "it contains /"
	case hasControl(name):
		why = "it contains control characters"
	case len(name) > MaxComponentLen:
		why = "it is longer than 255 bytes"
	default:
		return nil
	}
	return fmt.Errorf("%q is not a single safe file name: %s", name, why)
}

// Join is root + "/" + name after checking that name is one safe
// component; root must be normalized (see NormalizeAbs).
func Join(root, name string) (string, error) {
	if err := CheckComponent(name); err != nil {
		return "", err
	}
	if root == "/" {
		return "/" + name, nil
	}
	return root + "/" + name, nil
}

// CheckPvName fails unless a PV name is a lowercase DNS subdomain (at most
// 253 characters): always one safe directory name.
func CheckPvName(name string) error {
	if len(name) > MaxNameLen || !pvName.MatchString(name) {
		return fmt.Errorf("invalid volume name %q: it must be a lowercase DNS name "+
			"([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most %d characters) so that it is a single directory name under the root",
			name, MaxNameLen)
	}
	return nil
}

// SanitizeComponent is arbitrary text (a claim name, an annotation...) as
// one safe path component: characters other than ASCII letters, digits,
// "-", "_" and "." become "-", leading dots are dropped, the result is cut
// to 255 bytes; "" when nothing is left.
func SanitizeComponent(raw string) string {
	cut := strings.TrimLeft(unsafeChars.ReplaceAllString(raw, "-"), ".")
	if len(cut) > MaxComponentLen {
		cut = cut[:MaxComponentLen]
	}
	if strings.Trim(cut, "-") == "" {
		return ""
	}
	return cut
}
