package plugin

// Lines in the host's log, attributed to the plugin and the volume being
// processed; fields are key, value, key, value...
//
//	plugin.LogInfo("created volume directory", "path", directory)

// The levels, as the logging interface numbers them.
const (
	levelTrace uint8 = iota
	levelDebug
	levelInfo
	levelWarn
	levelError
)

func LogTrace(message string, fields ...string) { hostLog(levelTrace, message, fields) }
func LogDebug(message string, fields ...string) { hostLog(levelDebug, message, fields) }
func LogInfo(message string, fields ...string)  { hostLog(levelInfo, message, fields) }
func LogWarn(message string, fields ...string)  { hostLog(levelWarn, message, fields) }
func LogError(message string, fields ...string) { hostLog(levelError, message, fields) }
