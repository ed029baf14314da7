// Package cost turns the units of work an operation was measured to take
// (Lambda invocations and billed milliseconds at each function's memory,
// API requests, DynamoDB request units, ElastiCache ECPUs, analytics bytes)
// into dollars with AWS's public on-demand prices, declared once here with
// the date they were read. `make cost` (infra/bench, section cost) measures
// the units and prints what this package makes of them: dollars per million
// operations of each route and per month at the seeds' loads.
package cost

import "math"

// GB is the gigabyte AWS bills storage and data in (2^30 bytes).
const GB = 1 << 30

// HoursPerMonth is the month AWS's pricing pages and calculator use.
const HoursPerMonth = 730

// SecondsPerMonth is HoursPerMonth in seconds.
const SecondsPerMonth = HoursPerMonth * 3600

// Prices are AWS's public on-demand prices in one region, as read on one
// date: every price is in dollars per one unit (not per million).
type Prices struct {
	Region, Date string
	// Sources are the pages the prices were read from.
	Sources []string

	// LambdaGBSecond is arm64 duration, first 7.5 billion GB-seconds a
	// month; LambdaRequest each invocation. Duration is billed per
	// invocation, rounded up to the millisecond.
	LambdaGBSecond, LambdaRequest float64
	// HTTPAPIRequest is an API Gateway HTTP API request, first 300
	// million a month (metered in 512 KB increments: Rally's requests
	// and responses are far smaller).
	HTTPAPIRequest float64
	// DynamoDBWrite and DynamoDBRead are on-demand write and read request
	// units; DynamoDBGBMonth is Standard table storage.
	DynamoDBWrite, DynamoDBRead, DynamoDBGBMonth float64
	// CacheECPU and CacheGBHour are ElastiCache Serverless for Valkey
	// (the stack's default engine): an ECPU, and a GB held an hour.
	CacheECPU, CacheGBHour float64
	// FirehoseGB is Direct PUT ingestion, first 500 TB a month, each
	// record rounded up to FirehoseRecordRounding bytes;
	// FirehoseConversionGB converting to Parquet; FirehosePartitioningGB
	// dynamic partitioning, plus FirehoseObject per object it delivers.
	FirehoseGB, FirehoseConversionGB, FirehosePartitioningGB, FirehoseObject float64
	FirehoseRecordRounding                                                   float64
	// S3Put is a PUT request; S3GBMonth is Standard storage, first 50 TB.
	S3Put, S3GBMonth float64
}

// OnDemand is the price table: us-east-1 on-demand list prices, without
// free tiers, volume tiers or savings plans.
var OnDemand = Prices{
	Region: "us-east-1",
	Date:   "2026-11-28",
	Sources: []string{
		"https://aws.amazon.com/lambda/pricing/",
		"https://aws.amazon.com/api-gateway/pricing/",
		"https://aws.amazon.com/dynamodb/pricing/on-demand/",
		"https://aws.amazon.com/elasticache/pricing/",
		"https://aws.amazon.com/firehose/pricing/",
		"https://aws.amazon.com/s3/pricing/",
	},
	LambdaGBSecond:         0.0000133334,
	LambdaRequest:          0.20 / 1e6,
	HTTPAPIRequest:         1.00 / 1e6,
	DynamoDBWrite:          0.625 / 1e6,
	DynamoDBRead:           0.125 / 1e6,
	DynamoDBGBMonth:        0.25,
	CacheECPU:              0.0023 / 1e6,
	CacheGBHour:            0.084,
	FirehoseGB:             0.029,
	FirehoseConversionGB:   0.018,
	FirehosePartitioningGB: 0.020,
	FirehoseObject:         0.005 / 1000,
	FirehoseRecordRounding: 5 * 1024,
	S3Put:                  0.005 / 1000,
	S3GBMonth:              0.023,
}

// Invocations are one function's invocations for one operation: how many
// (a route's own 1; a stream processor's share of a batch, less than 1)
// and the milliseconds Lambda bills for them together (each invocation
// rounded up to the millisecond, then shared).
type Invocations struct {
	Function     string
	MemoryMB     int
	Count        float64
	BilledMillis float64
}

// Units are what one operation takes, averaged over many.
type Units struct {
	Lambda      []Invocations
	APIRequests float64
	// ReadUnits and WriteUnits are DynamoDB request units.
	ReadUnits, WriteUnits float64
	ECPU                  float64
	// AnalyticsEvents is how many analytics events the operation emits,
	// EventBytes the bytes of one as Firehose ingests it (a JSON line),
	// StoredBytes the bytes of one in S3 (Parquet).
	AnalyticsEvents, EventBytes, StoredBytes float64
}

// Dollars are what something costs, by service.
type Dollars struct {
	Lambda, API, DynamoDB, Redis, Analytics float64
}

// Total is the sum.
func (d Dollars) Total() float64 { return d.Lambda + d.API + d.DynamoDB + d.Redis + d.Analytics }

// Scale is d times k.
func (d Dollars) Scale(k float64) Dollars {
	return Dollars{d.Lambda * k, d.API * k, d.DynamoDB * k, d.Redis * k, d.Analytics * k}
}

// Plus is d + e.
func (d Dollars) Plus(e Dollars) Dollars {
	return Dollars{d.Lambda + e.Lambda, d.API + e.API, d.DynamoDB + e.DynamoDB, d.Redis + e.Redis, d.Analytics + e.Analytics}
}

// EventsPerRecord is how many events the shipper packs into one Firehose
// record at most (shared/analytics.MaxRecordEvents): at the seeds' rates
// every record is full, so the 5 KB rounding is spread over this many.
const EventsPerRecord = 500

// FirehoseBufferBytes is the delivery stream's buffer (infra/stack
// FirehoseBufferMiB): at the seeds' rates a partition fills it well
// inside the buffer interval, so each object delivered carries this many
// ingested bytes.
const FirehoseBufferBytes = 128 << 20

// BilledEventBytes is what Firehose bills for one event of eventBytes
// packed perRecord to a record: the record's bytes rounded up to the
// rounding, shared by its events.
func (p Prices) BilledEventBytes(eventBytes float64, perRecord int) float64 {
	if eventBytes <= 0 || perRecord <= 0 {
		return 0
	}
	record := eventBytes * float64(perRecord)
	return math.Ceil(record/p.FirehoseRecordRounding) * p.FirehoseRecordRounding / float64(perRecord)
}

// Of is what one operation of units u costs.
func (p Prices) Of(u Units) Dollars {
	var d Dollars
	for _, f := range u.Lambda {
		d.Lambda += f.Count*p.LambdaRequest + f.BilledMillis/1000*float64(f.MemoryMB)/1024*p.LambdaGBSecond
	}
	d.API = u.APIRequests * p.HTTPAPIRequest
	d.DynamoDB = u.ReadUnits*p.DynamoDBRead + u.WriteUnits*p.DynamoDBWrite
	d.Redis = u.ECPU * p.CacheECPU
	if u.AnalyticsEvents > 0 {
		ingested := u.AnalyticsEvents * u.EventBytes / GB
		billed := u.AnalyticsEvents * p.BilledEventBytes(u.EventBytes, EventsPerRecord) / GB
		objects := u.AnalyticsEvents * u.EventBytes / FirehoseBufferBytes
		// Firehose: ingestion (rounded), Parquet conversion and dynamic
		// partitioning of what it ingests, per object delivered; S3: each
		// object's PUT, and the Parquet bytes one month in Standard.
		d.Analytics = billed*p.FirehoseGB + ingested*(p.FirehoseConversionGB+p.FirehosePartitioningGB) +
			objects*(p.FirehoseObject+p.S3Put) + u.AnalyticsEvents*u.StoredBytes/GB*p.S3GBMonth
	}
	return d
}

// PerMillion is what a million operations of units u cost.
func (p Prices) PerMillion(u Units) Dollars { return p.Of(u).Scale(1e6) }

// CacheMonth is what holding bytes in the cache costs for a month.
func (p Prices) CacheMonth(bytes float64) float64 {
	return bytes / GB * HoursPerMonth * p.CacheGBHour
}
