//go:build tools

// Package tools names etcd's server command, so go mod tidy keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
