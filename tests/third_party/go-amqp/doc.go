/*
Package amqp provides an AMQP 1.0 client implementation.

AMQP 1.0 is not compatible with AMQP 0-9-1 or 0-10, which are
the most common AMQP protocols in use today.

The example below shows how to use this package to connect
to a Microsoft Azure Service Bus queue.
*/
package amqp // import "github.com/Azure/go-amqp"
