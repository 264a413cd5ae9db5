package server

// The types the handlers decode request bodies into, for the tests of
// package server_test: TestOpenAPIRequestBodies compares their JSON members
// with the request bodies docs/openapi.json documents.
type (
	CreateQueueRequest = createQueueRequest
	CreateGroupRequest = createGroupRequest
	SeekGroupRequest   = seekGroupRequest
	SendRequest        = sendRequest
	SendBatchRequest   = sendBatchRequest
	ReceiveRequest     = receiveRequest
	AckRequest         = ackRequest
	NackRequest        = nackRequest
	ExtendRequest      = extendRequest
	TransactionRequest = transactionRequest
	RedriveRequest     = redriveRequest
	DiscardRequest     = discardRequest
)
