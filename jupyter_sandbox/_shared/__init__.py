"""What every package of jupyter_sandbox shares and none owns: the defaults and ceilings, the
error and event types behind `errors` and `events`, the checks and grammars of user input,
secret masking, text and preview helpers, OpenTelemetry's thin layer. These modules import no
package of ours (an import-linter contract), so any package may import them."""
