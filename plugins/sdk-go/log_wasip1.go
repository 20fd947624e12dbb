//go:build wasip1

package plugin

import (
	"example.invalid/wasmprov/plugins/sdk-go/bindings/logging"
	witTypes "example.invalid/wasmprov/plugins/sdk-go/bindings/wit/types"
)

func hostLog(level uint8, message string, fields []string) {
	pairs := make([]witTypes.Tuple2[string, string], 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		pairs = append(pairs, witTypes.Tuple2[string, string]{F0: fields[i], F1: fields[i+1]})
	}
	logging.Log(level, message, pairs)
}
