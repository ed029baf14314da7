package awsapi

import (
	"errors"
	"fmt"
	"net/http"
)

// DeliveryStreamARN is the ARN a policy names a delivery stream by.
func DeliveryStreamARN(stream string) string {
	return "arn:aws:firehose:" + Region + ":" + AccountID + ":deliverystream/" + stream
}

// Firehose's limits on a call.
const (
	maxBatchRecords = 500
	maxRecordBytes  = 1000 << 10
)

// firehose serves PutRecord and PutRecordBatch into Options.Firehose.
func (c *call) firehose() {
	type record struct{ Data []byte }
	var in struct {
		DeliveryStreamName string
		Record             *record
		Records            []record
	}
	switch c.op.op {
	case "PutRecord", "PutRecordBatch":
	default:
		c.fail(http.StatusBadRequest, "UnknownOperationException", c.op.name+" is not served by the local AWS endpoint (Firehose: PutRecord, PutRecordBatch)")
		return
	}
	if !c.decode(&in) || !c.allowed(need{action: c.op.name, resource: DeliveryStreamARN(in.DeliveryStreamName)}) {
		return
	}
	if c.opts.Firehose == nil {
		c.fail(http.StatusBadRequest, "ResourceNotFoundException", "Firehose "+in.DeliveryStreamName+" not found: the local stack has no delivery streams")
		return
	}
	records := in.Records
	if c.op.op == "PutRecord" {
		if in.Record == nil {
			c.fail(http.StatusBadRequest, "InvalidArgumentException", "PutRecord needs a Record")
			return
		}
		records = []record{*in.Record}
	}
	if len(records) == 0 || len(records) > maxBatchRecords {
		c.fail(http.StatusBadRequest, "InvalidArgumentException", fmt.Sprintf("a call puts 1 to %d records, not %d", maxBatchRecords, len(records)))
		return
	}
	data := make([][]byte, len(records))
	for i, r := range records {
		if len(r.Data) == 0 || len(r.Data) > maxRecordBytes {
			c.fail(http.StatusBadRequest, "InvalidArgumentException", fmt.Sprintf("record %d has %d bytes; a record holds 1 to %d", i, len(r.Data), maxRecordBytes))
			return
		}
		data[i] = r.Data
	}
	failed, err := c.opts.Firehose.PutRecords(c.r.Context(), in.DeliveryStreamName, data)
	switch {
	case errors.Is(err, ErrNotFound):
		c.fail(http.StatusBadRequest, "ResourceNotFoundException", "Firehose "+in.DeliveryStreamName+" under account "+AccountID+" not found.")
		return
	case err != nil:
		c.log.Warn("local delivery stream failed", "function", c.caller.function, "stream", in.DeliveryStreamName, "error", err.Error())
		c.fail(http.StatusServiceUnavailable, "ServiceUnavailableException", "the local delivery stream failed: "+err.Error())
		return
	}
	if c.op.op == "PutRecord" {
		if len(failed) > 0 && failed[0] {
			c.fail(http.StatusServiceUnavailable, "ServiceUnavailableException", "the local delivery stream refused the record; send it again")
			return
		}
		writeJSON(c.w, contentType(c.r), http.StatusOK, map[string]any{"RecordId": randomHex(28), "Encrypted": false})
		return
	}
	responses := make([]map[string]string, len(records))
	refused := 0
	for i := range records {
		if i < len(failed) && failed[i] {
			refused++
			responses[i] = map[string]string{"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "the local delivery stream refused the record; send it again"}
			continue
		}
		responses[i] = map[string]string{"RecordId": randomHex(28)}
	}
	writeJSON(c.w, contentType(c.r), http.StatusOK, map[string]any{
		"FailedPutCount": refused, "Encrypted": false, "RequestResponses": responses,
	})
}
