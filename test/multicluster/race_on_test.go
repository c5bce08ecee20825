//go:build race

package multicluster

const raceEnabled = true
