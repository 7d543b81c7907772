module github.com/Azure/go-amqp

go 1.18

require (
	github.com/fortytw2/leaktest v1.3.0
	github.com/google/go-cmp v0.5.9
	github.com/stretchr/testify v1.8.4
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
