# A usage error keeps to its one line when the bad value holds a newline: the
# value is shown with \xNN, as every other message shows control bytes.
fsdpconv reshard --world-size "$(printf '1\n2')" -o out "$FIXTURES/dcp/model_ws2"
