//go:build tools

// Package tools pins CoreDNS's main package so that go.mod keeps its requirements.
package tools

import _ "github.com/coredns/coredns"
