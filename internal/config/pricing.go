package config

import "fmt"

// Pricing is the price table `ebbfs space --cost` estimates the monthly
// bill with. The defaults are Amazon S3 Standard's list prices in
// us-east-1 (USD, late 2024): approximate, without free tiers, data
// transfer out of the region, or other storage classes.
type Pricing struct {
	// Currency labels the figures (it converts nothing).
	Currency string `toml:"currency"`
	// StoragePerGBMonth is the price of a GiB stored for a month.
	StoragePerGBMonth float64 `toml:"storage_per_gb_month"`
	// WritePer1000 is the price of 1,000 PUT, COPY, POST or LIST requests.
	WritePer1000 float64 `toml:"write_per_1000"`
	// ReadPer1000 is the price of 1,000 GET, HEAD and other requests
	// (DELETE is free on S3 and counted at no price).
	ReadPer1000 float64 `toml:"read_per_1000"`
}

// The S3 Standard defaults.
const (
	DefaultCurrency          = "USD"
	DefaultStoragePerGBMonth = 0.023
	DefaultWritePer1000      = 0.005
	DefaultReadPer1000       = 0.0004
)

// ensureDefaults fills in the S3 Standard prices for what is unset.
func (p *Pricing) ensureDefaults() {
	if p.Currency == "" {
		p.Currency = DefaultCurrency
	}
	if p.StoragePerGBMonth == 0 {
		p.StoragePerGBMonth = DefaultStoragePerGBMonth
	}
	if p.WritePer1000 == 0 {
		p.WritePer1000 = DefaultWritePer1000
	}
	if p.ReadPer1000 == 0 {
		p.ReadPer1000 = DefaultReadPer1000
	}
}

// validate refuses negative prices.
func (p *Pricing) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"storage_per_gb_month", p.StoragePerGBMonth}, {"write_per_1000", p.WritePer1000}, {"read_per_1000", p.ReadPer1000}} {
		if f.v < 0 {
			return fmt.Errorf("pricing.%s = %v: a price cannot be negative", f.name, f.v)
		}
	}
	return nil
}
