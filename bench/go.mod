module github.com/sluicemq/sluice/bench

go 1.23.0

require (
	github.com/jackc/pgx/v5 v5.7.6
	github.com/riverqueue/river v0.24.0
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.24.0
	github.com/sluicemq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicemq/sluice/cmd/sluice v0.0.0-00010101000000-000000000000
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/fergusstrange/embedded-postgres v1.34.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20250211171154-1ae217ad3535 // indirect
	github.com/golang-jwt/jwt/v5 v5.2.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.2 // indirect
	github.com/lib/pq v1.10.9 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/prometheus/client_golang v1.22.0 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.62.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/riverqueue/river/riverdriver v0.24.0 // indirect
	github.com/riverqueue/river/rivershared v0.24.0 // indirect
	github.com/riverqueue/river/rivertype v0.24.0 // indirect
	github.com/sluicemq/sluice/internal/pgserver v0.0.0-00010101000000-000000000000 // indirect
	github.com/stretchr/testify v1.10.0 // indirect
	github.com/tidwall/gjson v1.18.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	github.com/xi2/xz v0.0.0-20171230120015-48954b6210f8 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	google.golang.org/protobuf v1.36.5 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/sluicemq/sluice => ..

replace github.com/sluicemq/sluice/cmd/sluice => ../cmd/sluice

replace github.com/sluicemq/sluice/internal/pgserver => ../internal/pgserver
