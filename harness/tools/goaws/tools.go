//go:build tools

// Package goaws pins the GoAws SQS emulator that the test harness builds and starts.
package goaws

import _ "github.com/Admiral-Piett/goaws/app/cmd"
