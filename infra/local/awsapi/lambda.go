package awsapi

import (
	"errors"
	"net/http"
	"strings"
)

// FunctionARN is the ARN a policy names function by.
func FunctionARN(function string) string {
	return "arn:aws:lambda:" + Region + ":" + AccountID + ":function:" + function
}

// lambdaInvokePath reads the function name out of an Invoke call's path,
// /2015-03-31/functions/{name}/invocations.
func lambdaInvokePath(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "/invocations")
	return name, ok && name != "" && !strings.Contains(name, "/")
}

// functionName is the function a FunctionName names: a name, a partial
// ARN (ACCOUNT:function:NAME) or an ARN, each perhaps with a qualifier.
func functionName(name string) string {
	if _, after, ok := strings.Cut(name, ":function:"); ok {
		name = after
	} else if strings.HasPrefix(name, "function:") {
		name = strings.TrimPrefix(name, "function:")
	}
	name, _, _ = strings.Cut(name, ":")
	return name
}

// Lambda's invocation types.
const (
	invokeSync   = "RequestResponse"
	invokeAsync  = "Event"
	invokeDryRun = "DryRun"
)

// lambda serves Invoke through Options.Invoke: synchronously, as an event
// (202, run in the background), or as a dry run (204, the permission check
// alone).
func (c *call) lambda() {
	function := functionName(c.op.target)
	if !c.allowed(need{"lambda:InvokeFunction", FunctionARN(function)}) {
		return
	}
	kind := c.r.Header.Get("X-Amz-Invocation-Type")
	if kind == "" {
		kind = invokeSync
	}
	if kind != invokeSync && kind != invokeAsync && kind != invokeDryRun {
		c.fail(http.StatusBadRequest, "InvalidParameterValueException", "X-Amz-Invocation-Type is RequestResponse, Event or DryRun, not "+kind)
		return
	}
	if c.opts.Invoke == nil {
		c.fail(http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+FunctionARN(function))
		return
	}
	switch kind {
	case invokeDryRun:
		c.w.WriteHeader(http.StatusNoContent)
		return
	case invokeAsync:
		// Lambda queues the event and answers at once; what the
		// invocation does is only logged.
		payload, caller := c.body, c.caller.function
		c.wg.Go(func() {
			if _, err := c.opts.Invoke(c.ctx, function, payload); err != nil && c.ctx.Err() == nil {
				c.log.Warn("asynchronous invocation failed", "function", caller, "invoked", function, "error", err.Error())
			}
		})
		c.w.Header().Set("X-Amzn-RequestId", randomHex(16))
		c.w.WriteHeader(http.StatusAccepted)
		return
	}
	out, err := c.opts.Invoke(c.r.Context(), function, c.body)
	switch {
	case errors.Is(err, ErrNotFound):
		c.fail(http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+FunctionARN(function))
		return
	case err != nil:
		c.w.Header().Set("X-Amz-Function-Error", "Unhandled")
		writeJSON(c.w, "application/json", http.StatusOK, map[string]string{"errorMessage": err.Error(), "errorType": "error"})
		return
	}
	c.w.Header().Set("Content-Type", "application/json")
	c.w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(out)
}
