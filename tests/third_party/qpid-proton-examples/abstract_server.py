#!/usr/bin/env python3
#
# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
#

from proton_server import Server


class Application(Server):
    def __init__(self, host, address):
        super(Application, self).__init__(host, address)

    def on_request(self, request, reply_to):
        response = request.upper()
        self.send(response, reply_to)
        print("Request from: %s" % reply_to)


try:
    Application("localhost:5672", "examples").run()
except KeyboardInterrupt:
    pass
