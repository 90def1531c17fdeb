//go:build tools

package tools

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
