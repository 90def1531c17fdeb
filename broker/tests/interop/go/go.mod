module gazette-bin

go 1.25

require go.gazette.dev/core v0.103.0
